"""HiMo@K: does the image-text score grow as a caption gets longer? (HiMo-CLIP, AAAI 2026, Sec. 4.2)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ties import DEFAULT_TIE_RULE, check_tie_rule, increasing_credit

METHODS = ("pearson", "accuracy")


def _pearson_with_index(scores: np.ndarray) -> float:
    """Pearson correlation between k = 1..K and ``scores``; 0.0 for a constant list."""
    index = np.arange(1, len(scores) + 1, dtype=np.float64)
    index -= index.mean()
    centered = scores - scores.mean()
    return float(index @ centered / np.sqrt((index @ index) * (centered @ centered)))


def himo_at_k(scores: Sequence[Sequence[float]], method: str | None = None,
              tie_rule: str = DEFAULT_TIE_RULE) -> dict[str, float | int | str]:
    """HiMo@K over a batch of images; ``scores[i]`` holds s_{t_1}..s_{t_K} for image i.

    - Eq. 5 (K > 3), ``"pearson"``: mean over images of the Pearson correlation between k = 1..K and
      s_{t_k}. A constant list (zero variance) counts as 0 and is counted in ``num_constant``.
    - Eq. 6 (K = 2, 3), ``"accuracy"``: percentage of images with strictly increasing scores
      s_{t_1} < s_{t_2} (< s_{t_3}). Equal scores (e.g. prefixes that differ only past a text encoder's token limit)
      are credited by ``tie_rule`` (`hf_longclip.metrics.ties.increasing_credit`): ``"fair"`` (default) the chance
      that they come out increasing when ordered at random (1/2 for two equal scores), ``"optimistic"`` and
      ``"first"`` (equal scores in prefix order) 1, ``"pessimistic"`` and ``"last"`` 0 (Eq. 6's strict order read
      literally). HiMo-CLIP's released code (UnicomAI/HiMo-CLIP, eval/text_mono/get_himo.py) computes Pearson's
      HiMo@K only, so Eq. 6 has no official tie-break and the default stays fair. Pearson (Eq. 5) reads the scores
      as values, not as an order: it has no tie rule; a constant list counts 0, as get_himo.py's
      ``pearson_correlation`` (``den == 0``).

    Lists may have different lengths. With ``method=None`` the definition follows each list's length and
    a batch mixing both kinds is rejected; ``method="pearson"`` or ``"accuracy"`` forces one definition for
    every list (any length >= 2).

    Returns ``{"himo_at_k": float, "method": str, "num_samples": int, "num_constant": int, "tie_rule": str}``.
    """
    check_tie_rule(tie_rule)
    if method is not None and method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS} or None")
    if len(scores) == 0:
        raise ValueError("scores is empty: need at least one list of scores")

    arrays = []
    for i, row in enumerate(scores):
        array = np.asarray(row, dtype=np.float64)
        if array.ndim != 1 or len(array) < 2:
            raise ValueError(f"scores[{i}] must be a flat list of at least 2 scores, got shape {array.shape}")
        if not np.all(np.isfinite(array)):
            raise ValueError(f"scores[{i}] contains NaN or inf: {array.tolist()}")
        arrays.append(array)

    if method is None:
        kinds = {"pearson" if len(array) > 3 else "accuracy" for array in arrays}
        if len(kinds) > 1:
            raise ValueError(
                "scores mixes lists of length > 3 (Pearson, Eq. 5) with lists of length 2 or 3 "
                "(accuracy, Eq. 6); pass method='pearson' or method='accuracy' to use one definition"
            )
        (method,) = kinds

    constant = [bool(np.all(array == array[0])) for array in arrays]
    if method == "pearson":
        values = [0.0 if flat else _pearson_with_index(array) for array, flat in zip(arrays, constant)]
    else:
        values = [100.0 * increasing_credit(array.tolist(), tie_rule) for array in arrays]
    return {
        "himo_at_k": float(np.mean(values)),
        "method": method,
        "num_samples": len(arrays),
        "num_constant": sum(constant),
        "tie_rule": tie_rule,
    }
