"""Zero-shot classification: prompt formatting, prompt-ensemble class embeddings, top-k accuracy."""

import math

import numpy as np
import pytest
import torch

from hf_longclip.metrics import (
    CIFAR_TEMPLATES,
    DEFAULT_TEMPLATES,
    IMAGENET_TEMPLATES,
    class_embeddings,
    format_prompts,
    zero_shot_classification,
)


def test_templates():
    assert DEFAULT_TEMPLATES == ("a photo of a {}.",)
    # CLIP's 80 ImageNet templates (openai/CLIP notebooks/imagenet_data.json), in order
    assert len(IMAGENET_TEMPLATES) == 80 == len(set(IMAGENET_TEMPLATES))
    assert IMAGENET_TEMPLATES[:3] == ("a bad photo of a {}.", "a photo of many {}.", "a sculpture of a {}.")
    assert IMAGENET_TEMPLATES[-2:] == ("a photo of a small {}.", "a tattoo of the {}.")
    assert IMAGENET_TEMPLATES.index("a photo of a {}.") == 39 and IMAGENET_TEMPLATES.index("itap of my {}.") == 76
    assert len(CIFAR_TEMPLATES) == 18 == len(set(CIFAR_TEMPLATES)) and CIFAR_TEMPLATES[-1] == "a photo of the big {}."
    assert all(t.count("{}") == 1 for t in IMAGENET_TEMPLATES + CIFAR_TEMPLATES)


def test_format_prompts():
    assert format_prompts(["cat", "red fox"], ("a photo of a {}.", "art of the {}.")) == [
        ["a photo of a cat.", "art of the cat."],
        ["a photo of a red fox.", "art of the red fox."],
    ]
    assert format_prompts(["dog"]) == [["a photo of a dog."]]


@pytest.mark.parametrize(
    "classnames, templates, message",
    [
        ([], DEFAULT_TEMPLATES, "classnames must be a non-empty list"),
        ("cat", DEFAULT_TEMPLATES, "classnames must be a non-empty list"),
        (["cat"], (), "templates must be a non-empty list"),
        (["cat"], ("a photo.",), "exactly one '{}' placeholder, got 'a photo.'"),
        (["cat"], ("{} and {}",), "exactly one '{}' placeholder"),
    ],
)
def test_format_prompts_errors(classnames, templates, message):
    with pytest.raises(ValueError, match=message):
        format_prompts(classnames, templates)


def test_class_embeddings_normalise_average_normalise():
    per_template = [
        [[3.0, 0.0], [0.0, 4.0]],  # -> (1, 0), (0, 1) -> mean (0.5, 0.5) -> (1, 1) / sqrt 2
        [[-1.0, 0.0], [-2.0, 0.0]],  # -> (-1, 0) twice
    ]
    out = class_embeddings(per_template)
    s = 1 / math.sqrt(2)
    assert out.dtype == torch.float64  # lists of Python floats stay float64
    assert torch.allclose(out, torch.tensor([[s, s], [-1.0, 0.0]], dtype=torch.float64))
    # not the plain mean of the raw embeddings, which would be (1.5, 2) / 2.5 = (0.6, 0.8) for class 0
    assert not torch.allclose(out[0], torch.tensor([0.6, 0.8], dtype=torch.float64))


def test_class_embeddings_errors():
    with pytest.raises(ValueError, match="text_embeds_per_template must have 3 dims"):
        class_embeddings(np.ones((3, 4)))
    with pytest.raises(ValueError, match="text_embeds_per_template has a zero vector"):
        class_embeddings([[[1.0, 0.0], [0.0, 0.0]]])
    with pytest.raises(ValueError, match="average to zero"):
        class_embeddings([[[1.0, 0.0], [-2.0, 0.0]]])


# scores[image][class] = image_embeds @ class_embeds.T with class_embeds = identity
HAND_SCORES = np.array(
    [
        [0.9, 0.1, 0.2, 0.0],  # label 0: rank 0
        [0.5, 0.4, 0.6, 0.1],  # label 1: rank 2
        [0.3, 0.3, 0.1, 0.2],  # label 1: ties with class 0 -> top-1 1/2 (fair), 1 (optimistic), 0 (pessimistic)
        [0.8, 0.7, 0.6, 0.5],  # label 3: rank 3
    ]
)


def test_hand_computed_top_k():
    result = zero_shot_classification(HAND_SCORES, np.eye(4), [0, 1, 1, 3], ks=(1, 2, 3, 4))
    assert result == {"top1": 37.5, "top2": 50.0, "top3": 75.0, "top4": 100.0, "num_samples": 4, "tie_rule": "fair"}
    for rule, top1 in (("optimistic", 50.0), ("pessimistic", 25.0)):
        assert zero_shot_classification(HAND_SCORES, np.eye(4), [0, 1, 1, 3], ks=(1,), tie_rule=rule)["top1"] == top1


def test_k_larger_than_classes_is_an_error():
    with pytest.raises(ValueError, match=r"k=5 exceeds the number of classes \(4\)"):
        zero_shot_classification(HAND_SCORES, np.eye(4), [0, 1, 1, 3])


@pytest.mark.parametrize("chunk_size", [1, 3, 4096])
def test_matches_clip_notebook_accuracy(chunk_size):
    """CLIP's notebook: logits = 100 * image @ weights, topk(max(k)), count targets among the first k."""
    rng = np.random.default_rng(0)
    num_classes, d = 20, 8
    classes = class_embeddings(rng.standard_normal((num_classes, 5, d)))
    labels = rng.integers(0, num_classes, 300)
    images = classes[labels].numpy() + 0.9 * rng.standard_normal((300, d)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    logits = 100.0 * torch.from_numpy(images) @ classes.T
    pred = logits.topk(5, 1, True, True)[1].t()
    correct = pred.eq(torch.from_numpy(labels).view(1, -1).expand_as(pred))
    expected = {f"top{k}": correct[:k].reshape(-1).float().sum().item() / 300 * 100 for k in (1, 5)}
    result = zero_shot_classification(images, classes, labels, chunk_size=chunk_size)
    assert result == {**{k: pytest.approx(v) for k, v in expected.items()}, "num_samples": 300, "tie_rule": "fair"}
    assert 0 < result["top1"] < result["top5"] < 100


@pytest.mark.parametrize(
    "images, classes, labels, kwargs, message",
    [
        (HAND_SCORES, np.eye(3, 4), [0, 1, 1, 3], {"ks": (1,)}, r"labels\[3\] = 3 is out of range: must be in \[0, 3"),
        (HAND_SCORES, np.eye(4), [0, 1, 1], {"ks": (1,)}, "labels has 3 entries, expected 4"),
        (HAND_SCORES, np.eye(4)[:, :3], [0, 1, 1, 3], {"ks": (1,)}, "embedding dims differ: image_embeds has dim 4"),
        (HAND_SCORES[0], np.eye(4), [0], {"ks": (1,)}, "image_embeds must have 2 dims"),
        (np.zeros((0, 4)), np.eye(4), [], {"ks": (1,)}, "image_embeds is empty"),
        (HAND_SCORES, np.full((4, 4), np.nan), [0, 1, 1, 3], {"ks": (1,)}, "class_embeds contains NaN or inf"),
        (HAND_SCORES, np.eye(4), [0, 1, 1, 3], {"ks": (0,)}, "ks must be a non-empty sequence of positive integers"),
        (HAND_SCORES, np.eye(4), [0, 1, 1, 3], {"ks": (1,), "chunk_size": 0}, "chunk_size must be a positive"),
    ],
)
def test_bad_inputs_raise(images, classes, labels, kwargs, message):
    with pytest.raises(ValueError, match=message):
        zero_shot_classification(images, classes, labels, **kwargs)
