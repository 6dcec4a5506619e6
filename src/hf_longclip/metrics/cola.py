"""COLA multi-object accuracy (Ray et al., NeurIPS 2023, "Cola: A Benchmark for Compositional Text-to-image
Retrieval"), as ``ColaMultiObjAcc`` of ``scripts/eval.py`` in https://github.com/arijitray1993/COLA."""

from __future__ import annotations

import numpy as np
import torch

from .ties import COLA_TIE_RULE, pairwise_credit

DIRECTIONS = ("text_to_image", "image_to_text", "group")


def cola_multi(scores, direction: str = "text_to_image",
               tie_rule: str = COLA_TIE_RULE) -> dict[str, float | int | str]:
    """Percent of image pairs matched correctly; ``scores[n][i][c]`` is the score of image i with caption c of pair n,
    shape (N, 2, 2); caption c describes image c and the two captions swap the objects' attributes.

    - ``"text_to_image"`` (default, COLA's metric): correct iff each caption scores higher with its own image,
      ``s[0,0] > s[1,0] and s[1,1] > s[0,1]`` (``image_correct = im0_c0 > im1_c0 and im1_c1 > im0_c1`` in
      ``ColaMultiObjAcc``).
    - ``"image_to_text"``: each image scores higher with its own caption, ``s[0,0] > s[0,1] and s[1,1] > s[1,0]``.
    - ``"group"``: both of the above.

    Each comparison is a query with a gallery of two, breaking its own ties: a pair scores the product of its
    comparisons' credits (`hf_longclip.metrics.ties.pairwise_credit`). ``tie_rule="pessimistic"`` (default,
    `COLA_TIE_RULE`: a tie is wrong, strict ``>``) is ``ColaMultiObjAcc`` exactly (scripts/eval.py, commit 1fa52fb);
    ``"fair"`` is the chance that every comparison comes out right when ties are broken at random (1/2 per tie);
    ``"optimistic"`` counts ties as right; ``"first"`` / ``"last"`` give a tie to the candidate of lower / higher
    index (image 0 or caption 0 first). Returns ``{"accuracy": percent, "num_samples": N, "tie_rule": tie_rule}``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; expected one of {DIRECTIONS}")
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("scores must be a numeric array of shape (N, 2, 2) (ragged input?)") from None
    if s.ndim != 3 or s.shape[1:] != (2, 2):
        raise ValueError(f"scores must have shape (N, 2, 2) = [pair][image][caption], got {s.shape}")
    if s.shape[0] == 0:
        raise ValueError("scores is empty: need at least one image pair")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contains NaN or inf")
    s = torch.from_numpy(s)

    def wins(own: torch.Tensor, other: torch.Tensor, own_first: bool) -> torch.Tensor:
        return pairwise_credit(own - other, tie_rule, own_first=own_first)

    # caption c's own image (image_to_text: image i's own caption) has index c (i): the first of the two for c = 0
    text_to_image = wins(s[:, 0, 0], s[:, 1, 0], True) * wins(s[:, 1, 1], s[:, 0, 1], False)
    image_to_text = wins(s[:, 0, 0], s[:, 0, 1], True) * wins(s[:, 1, 1], s[:, 1, 0], False)
    correct = {"text_to_image": text_to_image, "image_to_text": image_to_text,
               "group": text_to_image * image_to_text}[direction]
    return {"accuracy": correct.mean().item() * 100, "num_samples": int(s.shape[0]), "tie_rule": tie_rule}
