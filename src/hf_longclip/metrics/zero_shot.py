"""Zero-shot image classification with prompt ensembles (CLIP, Radford et al. 2021, Sec. 3.1.4; OneLIP Table 3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .retrieval import _check_ks, _count_above_and_tied, as_embedding_pair, as_embeddings, as_index
from .ties import DEFAULT_TIE_RULE, INDEX_RULES, check_tie_rule, hit_credit, tied_ahead

DEFAULT_TEMPLATES: tuple[str, ...] = ("a photo of a {}.",)

# The 80 ImageNet prompt templates of CLIP, in their order: "imagenet_templates" of notebooks/imagenet_data.json
# in https://github.com/openai/CLIP (used by notebooks/Prompt_Engineering_for_ImageNet.ipynb).
IMAGENET_TEMPLATES: tuple[str, ...] = (
    "a bad photo of a {}.", "a photo of many {}.", "a sculpture of a {}.", "a photo of the hard to see {}.",
    "a low resolution photo of the {}.", "a rendering of a {}.", "graffiti of a {}.", "a bad photo of the {}.",
    "a cropped photo of the {}.", "a tattoo of a {}.", "the embroidered {}.", "a photo of a hard to see {}.",
    "a bright photo of a {}.", "a photo of a clean {}.", "a photo of a dirty {}.", "a dark photo of the {}.",
    "a drawing of a {}.", "a photo of my {}.", "the plastic {}.", "a photo of the cool {}.",
    "a close-up photo of a {}.", "a black and white photo of the {}.", "a painting of the {}.",
    "a painting of a {}.", "a pixelated photo of the {}.", "a sculpture of the {}.", "a bright photo of the {}.",
    "a cropped photo of a {}.", "a plastic {}.", "a photo of the dirty {}.", "a jpeg corrupted photo of a {}.",
    "a blurry photo of the {}.", "a photo of the {}.", "a good photo of the {}.", "a rendering of the {}.",
    "a {} in a video game.", "a photo of one {}.", "a doodle of a {}.", "a close-up photo of the {}.",
    "a photo of a {}.", "the origami {}.", "the {} in a video game.", "a sketch of a {}.", "a doodle of the {}.",
    "a origami {}.", "a low resolution photo of a {}.", "the toy {}.", "a rendition of the {}.",
    "a photo of the clean {}.", "a photo of a large {}.", "a rendition of a {}.", "a photo of a nice {}.",
    "a photo of a weird {}.", "a blurry photo of a {}.", "a cartoon {}.", "art of a {}.", "a sketch of the {}.",
    "a embroidered {}.", "a pixelated photo of a {}.", "itap of the {}.", "a jpeg corrupted photo of the {}.",
    "a good photo of a {}.", "a plushie {}.", "a photo of the nice {}.", "a photo of the small {}.",
    "a photo of the weird {}.", "the cartoon {}.", "art of the {}.", "a drawing of the {}.",
    "a photo of the large {}.", "a black and white photo of a {}.", "the plushie {}.", "a dark photo of a {}.",
    "itap of a {}.", "graffiti of the {}.", "a toy {}.", "itap of my {}.", "a photo of a cool {}.",
    "a photo of a small {}.", "a tattoo of the {}.",
)

# The 18 CIFAR-10 / CIFAR-100 templates of CLIP: data/prompts.md in https://github.com/openai/CLIP.
CIFAR_TEMPLATES: tuple[str, ...] = (
    "a photo of a {}.", "a blurry photo of a {}.", "a black and white photo of a {}.",
    "a low contrast photo of a {}.", "a high contrast photo of a {}.", "a bad photo of a {}.",
    "a good photo of a {}.", "a photo of a small {}.", "a photo of a big {}.", "a photo of the {}.",
    "a blurry photo of the {}.", "a black and white photo of the {}.", "a low contrast photo of the {}.",
    "a high contrast photo of the {}.", "a bad photo of the {}.", "a good photo of the {}.",
    "a photo of the small {}.", "a photo of the big {}.",
)


def format_prompts(classnames: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES) -> list[list[str]]:
    """``prompts[c][t] = templates[t].format(classnames[c])``: encode them, shape the embeddings as
    (num_classes, num_templates, d) and pass them to `class_embeddings`."""
    if isinstance(classnames, str) or len(classnames) == 0:
        raise ValueError("classnames must be a non-empty list of strings")
    if isinstance(templates, str) or len(templates) == 0:
        raise ValueError("templates must be a non-empty list of strings")
    for template in templates:
        if template.count("{}") != 1:
            raise ValueError(f"each template needs exactly one '{{}}' placeholder, got {template!r}")
    return [[template.format(name) for template in templates] for name in classnames]


def class_embeddings(text_embeds_per_template) -> torch.Tensor:
    """Prompt-ensemble class embeddings, shape (num_classes, d), from (num_classes, num_templates, d) text embeddings:
    L2-normalise each template embedding, average over templates, L2-normalise the mean (CLIP's
    ``zeroshot_classifier`` in notebooks/Prompt_Engineering_for_ImageNet.ipynb)."""
    embeds = as_embeddings(text_embeds_per_template, "text_embeds_per_template", ndim=3)
    norms = embeds.norm(dim=-1, keepdim=True)
    if (norms == 0).any():
        raise ValueError("text_embeds_per_template has a zero vector, which cannot be L2-normalised")
    mean = (embeds / norms).mean(dim=1)
    mean_norm = mean.norm(dim=-1, keepdim=True)
    if (mean_norm == 0).any():
        raise ValueError("the normalised template embeddings of a class average to zero")
    return mean / mean_norm


def zero_shot_classification(
    image_embeds,
    class_embeds,
    labels,
    ks: Sequence[int] = (1, 5),
    chunk_size: int = 4096,
    tie_rule: str = DEFAULT_TIE_RULE,
) -> dict[str, float | int | str]:
    """Top-k accuracy (percent) of classifying each image as the class of highest ``image_embeds @ class_embeds.T``.

    ``image_embeds`` (num_images, d), ``class_embeds`` (num_classes, d) (e.g. from `class_embeddings`), ``labels``
    (num_images,) the true class indices. Scaling an image embedding does not change its ranking, so images need not
    be normalised. An image is correct at k if its true class is among the k best-scored; a true class with g
    classes scored strictly higher and t tied with it counts ``clamp((k - g) / (t + 1), 0, 1)`` under
    ``tie_rule="fair"`` (default), ``g < k`` ``"optimistic"``, ``g + t < k`` ``"pessimistic"``, and ``g`` + the
    tied classes of lower (``"first"``) / higher (``"last"``) index ``< k`` (as `recall_at_k`). The fair default
    is CLIP_benchmark's rule in expectation: its ``accuracy`` takes ``logits.topk(5)`` on the CPU, whose order of
    tied classes is implementation-defined (neither the lower nor the higher index first).
    A k larger than the number of classes raises a ValueError (top-5 of 3
    classes would be a meaningless 100%): pass e.g. ``ks=(1,)``. Images are scored ``chunk_size`` at a time.

    Returns ``{"top1": ..., "top5": ..., "num_samples": num_images, "tie_rule": tie_rule}`` (keys follow ``ks``).
    """
    ks = _check_ks(ks)
    check_tie_rule(tie_rule)
    images, classes = as_embedding_pair(image_embeds, "image_embeds", class_embeds, "class_embeds")
    num_images, num_classes = images.shape[0], classes.shape[0]
    if max(ks) > num_classes:
        raise ValueError(f"k={max(ks)} exceeds the number of classes ({num_classes}); use smaller ks")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    target = as_index(labels, "labels", num_images, num_classes, "num_classes")
    by_index = tie_rule in INDEX_RULES
    above, tied, ahead = (torch.zeros(num_images, dtype=torch.int64) for _ in range(3))
    for lo in range(0, num_images, chunk_size):
        scores = images[lo : lo + chunk_size] @ classes.T
        own = scores.gather(1, target[lo : lo + chunk_size, None])
        if by_index:
            ahead[lo : lo + chunk_size] = tied_ahead(scores == own, target[lo : lo + chunk_size], tie_rule)
        above[lo : lo + chunk_size], tied[lo : lo + chunk_size] = _count_above_and_tied(scores, own)
    one = torch.ones_like(tied)
    result: dict[str, float | int | str] = {
        f"top{k}": hit_credit(above, tied - 1, one, k, tie_rule, ahead if by_index else None).mean().item() * 100
        for k in ks}
    result["num_samples"] = num_images
    result["tie_rule"] = tie_rule
    return result
