"""long_text_retrieval: several captions per image, chunked; checked by hand, against recall_at_k and against a
full-matrix reference written like the usual VSE++ evaluation loop (random embeddings: no ties, so every tie rule
agrees with it); the tie rules on constructed ties are in test_ties.py."""

import numpy as np
import pytest
import torch

from hf_longclip.metrics import long_text_retrieval, recall_at_k
from hf_longclip.metrics import retrieval as retrieval_module

# S[image][text] for 3 images and 5 texts; texts 0-1 describe image 0, text 2 image 1, texts 3-4 image 2.
HAND_SCORES = np.array(
    [
        [0.9, 0.1, 0.5, 0.3, 0.2],  # image 0: best caption 0.9 is first -> rank 0
        [0.6, 0.2, 0.4, 0.7, 0.1],  # image 1: its caption 0.4 has 0.6 and 0.7 above it -> rank 2
        [0.3, 0.8, 0.1, 0.2, 0.8],  # image 2: best caption 0.8 ties with text 1 -> R@1 1/2 (fair), R@2 1
    ]
)
HAND_OWNER = [0, 0, 1, 2, 2]


def embeds_for_scores(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Image and text embeddings whose dot products are exactly ``scores`` (num_images x num_texts)."""
    return np.eye(scores.shape[0]), scores.T.copy()


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def reference(images: np.ndarray, texts: np.ndarray, owner: np.ndarray, ks) -> dict:
    """Full similarity matrix, sort every row, rank = position of the (best) positive: the VSE++ `i2t` / `t2i`."""
    sims = images.astype(np.float64) @ texts.astype(np.float64).T
    i2t = []
    for i, row in enumerate(sims):
        order = np.argsort(-row, kind="stable")
        i2t.append(min(int(np.where(order == t)[0][0]) for t in np.flatnonzero(owner == i)))
    t2i = []
    for t, column in enumerate(sims.T):
        order = np.argsort(-column, kind="stable")
        t2i.append(int(np.where(order == owner[t])[0][0]))
    out = {}
    for name, ranks in (("i2t", np.array(i2t)), ("t2i", np.array(t2i))):
        for k in ks:
            out[f"r{k}_{name}"] = 100.0 * np.mean(ranks < k)
    return out


def test_hand_computed_ranks_and_ties():
    images, texts = embeds_for_scores(HAND_SCORES)
    result = long_text_retrieval(images, texts, HAND_OWNER, ks=(1, 2, 3))
    # image ranks 0, 2, 0 (image 2 tied with one negative: 1/2 at R@1); text ranks (column by column) 0, 2, 1, 2, 0
    assert result == {
        "r1_i2t": pytest.approx(150 / 3), "r2_i2t": pytest.approx(200 / 3), "r3_i2t": 100.0,
        "r1_t2i": 40.0, "r2_t2i": 60.0, "r3_t2i": 100.0,
        "rsum": pytest.approx(150 / 3 + 200 / 3 + 100 + 40 + 60 + 100),
        "num_images": 3, "num_texts": 5, "ties_i2t": 1, "ties_t2i": 0,  # image 2's tie; no column has one
        "tie_rule": "fair",
    }
    optimistic = long_text_retrieval(images, texts, HAND_OWNER, ks=(1,), tie_rule="optimistic")
    pessimistic = long_text_retrieval(images, texts, HAND_OWNER, ks=(1,), tie_rule="pessimistic")
    assert (optimistic["r1_i2t"], pessimistic["r1_i2t"]) == (pytest.approx(200 / 3), pytest.approx(100 / 3))
    assert list(result)[:6] == ["r1_i2t", "r2_i2t", "r3_i2t", "r1_t2i", "r2_t2i", "r3_t2i"]


def test_default_keys_and_rsum():
    images, texts = embeds_for_scores(HAND_SCORES)
    result = long_text_retrieval(images, texts, HAND_OWNER)
    assert list(result) == ["r1_i2t", "r5_i2t", "r10_i2t", "r1_t2i", "r5_t2i", "r10_t2i", "rsum",
                            "num_images", "num_texts", "ties_i2t", "ties_t2i", "tie_rule"]
    # K beyond the candidates counts every query as a hit, as recall_at_k does
    assert result["rsum"] == pytest.approx(150 / 3 + 100 + 100 + 40 + 100 + 100)


def test_any_caption_counts_for_image_to_text():
    # image 1's first caption is ranked last, its second first: a hit at 1
    scores = np.array([[0.9, 0.8, 0.1], [0.5, 0.1, 0.6]])
    images, texts = embeds_for_scores(scores)
    assert long_text_retrieval(images, texts, [0, 1, 1], ks=(1,))["r1_i2t"] == 100.0
    assert long_text_retrieval(images, texts, [0, 1, 1], ks=(1,))["r1_t2i"] == pytest.approx(200 / 3)


@pytest.mark.parametrize("chunk_size", [None, 1, 7, 1000])
def test_one_caption_per_image_equals_recall_at_k(chunk_size):
    rng = np.random.default_rng(0)
    images, texts = torch.from_numpy(unit(rng, 60, 16)), torch.from_numpy(unit(rng, 60, 16))
    similarity = images @ texts.T
    result = long_text_retrieval(images, texts, list(range(60)), ks=(1, 5, 10), chunk_size=chunk_size)
    for k in (1, 5, 10):
        assert result[f"r{k}_i2t"] == recall_at_k(similarity, k)
        assert result[f"r{k}_t2i"] == recall_at_k(similarity.T, k)


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 64, 10_000])
def test_matches_full_matrix_reference_with_five_captions(chunk_size):
    rng = np.random.default_rng(1)
    num_images, d = 40, 8
    owner = rng.permutation(np.repeat(np.arange(num_images), 5))  # captions not grouped by image
    images = unit(rng, num_images, d)
    texts = images[owner] + 2.0 * unit(rng, len(owner), d)  # noisy captions: recall far from 0 and 100
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    expected = reference(images, texts, owner, (1, 5, 10))
    result = long_text_retrieval(images, texts, owner, chunk_size=chunk_size)
    assert {k: result[k] for k in expected} == pytest.approx(expected)
    assert 0 < result["r1_i2t"] < result["r10_i2t"] < 100 and 0 < result["r1_t2i"] < result["r10_t2i"] < 100
    assert result["num_images"] == num_images and result["num_texts"] == 200


def test_ragged_caption_counts_and_input_types():
    rng = np.random.default_rng(2)
    owner = np.array([0, 1, 1, 2, 2, 2, 3, 0, 3, 3])
    images, texts = unit(rng, 4, 5), unit(rng, len(owner), 5)
    expected = reference(images, texts, owner, (1, 2))
    for args in [(images, texts, owner), (torch.from_numpy(images), torch.from_numpy(texts), torch.from_numpy(owner)),
                 (images.tolist(), texts.tolist(), owner.tolist()),
                 (torch.from_numpy(images).half(), torch.from_numpy(texts).half(), owner)]:
        result = long_text_retrieval(*args, ks=(1, 2))
        if args[0].__class__ is torch.Tensor and args[0].dtype == torch.float16:
            expected_half = reference(args[0].float().numpy(), args[1].float().numpy(), owner, (1, 2))
            assert {k: result[k] for k in expected_half} == pytest.approx(expected_half)
        else:
            assert {k: result[k] for k in expected} == pytest.approx(expected)


def test_scores_are_chunked(monkeypatch):
    """No score matrix larger than one chunk is ever computed."""
    shapes = []
    original = torch.Tensor.__matmul__

    def recording_matmul(self, other):
        out = original(self, other)
        shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", recording_matmul)
    rng = np.random.default_rng(3)
    owner = np.repeat(np.arange(100), 3)
    images, texts = unit(rng, 100, 4), unit(rng, 300, 4)
    full = long_text_retrieval(images, texts, owner, chunk_size=100_000)
    assert (100, 300) in shapes and (300, 100) in shapes  # the recorder sees the matmuls

    shapes.clear()
    assert long_text_retrieval(images, texts, owner, chunk_size=4) == full
    assert shapes and max(rows for rows, _ in shapes) == 4

    shapes.clear()
    monkeypatch.setattr(retrieval_module, "CHUNK_ELEMENTS", 1000)
    assert long_text_retrieval(images, texts, owner) == full
    assert shapes and max(rows * cols for rows, cols in shapes) <= 1000
    assert {shape[1] for shape in shapes} == {300, 100}


def test_long_rows_count_without_float_sums(monkeypatch):
    rng = np.random.default_rng(4)
    owner = np.repeat(np.arange(20), 2)
    images = unit(rng, 20, 4)
    texts = images[owner] + unit(rng, 40, 4)
    expected = reference(images, texts, owner, (1, 5, 10))
    monkeypatch.setattr(retrieval_module, "EXACT_FLOAT_COUNT", 10)  # rows of 20 and 40 candidates take the other way
    result = long_text_retrieval(images, texts, owner)
    assert {k: result[k] for k in expected} == pytest.approx(expected)
    assert 0 < result["r1_i2t"] < 100 and 0 < result["r1_t2i"] < 100


def test_image_without_caption_is_an_error():
    images, texts = embeds_for_scores(HAND_SCORES)
    with pytest.raises(ValueError, match=r"1 image\(s\) have no caption .* first: image 1"):
        long_text_retrieval(images, texts, [0, 0, 2, 2, 2])


GOOD_IMAGES, GOOD_TEXTS = embeds_for_scores(HAND_SCORES)


@pytest.mark.parametrize(
    "images, texts, owner, kwargs, message",
    [
        (GOOD_IMAGES[0], GOOD_TEXTS, HAND_OWNER, {}, r"image_embeds must have 2 dims, got shape \(3,\)"),
        (GOOD_IMAGES, GOOD_TEXTS[None], HAND_OWNER, {}, r"text_embeds must have 2 dims, got shape \(1, 5, 3\)"),
        (GOOD_IMAGES, GOOD_TEXTS[:, :2], HAND_OWNER, {}, "embedding dims differ: image_embeds has dim 3, text_embeds"),
        (np.where(np.eye(3) == 1, np.nan, 0), GOOD_TEXTS, HAND_OWNER, {}, "image_embeds contains NaN or inf"),
        (GOOD_IMAGES, np.full((5, 3), np.inf), HAND_OWNER, {}, "text_embeds contains NaN or inf"),
        (GOOD_IMAGES, np.where(GOOD_TEXTS > 0.85, -np.inf, GOOD_TEXTS), HAND_OWNER, {}, "text_embeds contains NaN"),
        (np.zeros((0, 3)), GOOD_TEXTS, HAND_OWNER, {}, r"image_embeds is empty: shape \(0, 3\)"),
        (GOOD_IMAGES, np.zeros((0, 3)), [], {}, r"text_embeds is empty"),
        ([[1.0, 0.0], [1.0]], GOOD_TEXTS, HAND_OWNER, {}, "image_embeds must be a numeric array"),
        (GOOD_IMAGES, GOOD_TEXTS, [0, 0, 1, 2, 3], {}, r"text_to_image\[4\] = 3 is out of range: must be in \[0, 3\)"),
        (GOOD_IMAGES, GOOD_TEXTS, [0, -1, 1, 2, 2], {}, r"text_to_image\[1\] = -1 is out of range"),
        (GOOD_IMAGES, GOOD_TEXTS, [0, 0, 1, 2], {}, "text_to_image has 4 entries, expected 5"),
        (GOOD_IMAGES, GOOD_TEXTS, [0.0, 0.0, 1.0, 2.0, 2.0], {}, "text_to_image must hold integers"),
        (GOOD_IMAGES, GOOD_TEXTS, [[0, 0, 1, 2, 2]], {}, "text_to_image must be 1-D"),
        (GOOD_IMAGES, GOOD_TEXTS, HAND_OWNER, {"ks": ()}, "ks must be a non-empty sequence of positive integers"),
        (GOOD_IMAGES, GOOD_TEXTS, HAND_OWNER, {"ks": (1, 0)}, "ks must be a non-empty sequence of positive"),
        (GOOD_IMAGES, GOOD_TEXTS, HAND_OWNER, {"chunk_size": 0}, "chunk_size must be a positive integer or None"),
    ],
)
def test_bad_inputs_raise(images, texts, owner, kwargs, message):
    with pytest.raises(ValueError, match=message):
        long_text_retrieval(images, texts, owner, **kwargs)
