"""Semantic Stability Index (HiMo-CLIP, Appendix C.3, Eq. 22): how much image-text scores move when an unrelated
sentence is inserted into the caption."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ssi(original_scores: Sequence[Sequence[float]], noisy_scores: Sequence[Sequence[float]]) -> dict[str, float | int]:
    """SSI = 1/N sum_i 1/M_i sum_j |s_ori - s_noise| / s_ori * 100 (HiMo-CLIP Eq. 22); lower is more robust.

    ``original_scores[i]`` holds the scores s_{j,ori} of sample i's M_i hierarchical subtexts with the image and
    ``noisy_scores[i]`` the scores s_{j,noise} of the same subtexts after noise insertion; M_i may differ between
    samples (ragged lists), but ``noisy_scores[i]`` must match ``original_scores[i]`` in length. Every s_ori must be
    > 0 (the relative change is undefined otherwise). A sample with a single caption is a list of one score.

    Returns ``{"ssi": float, "num_samples": N, "num_subtexts": sum_i M_i}``.
    """
    if len(original_scores) == 0:
        raise ValueError("original_scores is empty: need at least one sample")
    if len(original_scores) != len(noisy_scores):
        raise ValueError(
            f"original_scores has {len(original_scores)} samples but noisy_scores has {len(noisy_scores)}"
        )
    per_sample = []
    num_subtexts = 0
    for i, (ori_row, noise_row) in enumerate(zip(original_scores, noisy_scores)):
        arrays = []
        for name, row in (("original_scores", ori_row), ("noisy_scores", noise_row)):
            try:
                array = np.asarray(row, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{name}[{i}] must be a flat list of numbers") from None
            if array.ndim != 1 or len(array) == 0:
                raise ValueError(f"{name}[{i}] must be a flat, non-empty list of scores, got shape {array.shape}")
            if not np.all(np.isfinite(array)):
                raise ValueError(f"{name}[{i}] contains NaN or inf: {array.tolist()}")
            arrays.append(array)
        ori, noise = arrays
        if len(ori) != len(noise):
            raise ValueError(
                f"sample {i}: original_scores[{i}] has {len(ori)} subtext scores but noisy_scores[{i}] has {len(noise)}"
            )
        if np.any(ori <= 0):
            j = int(np.flatnonzero(ori <= 0)[0])
            raise ValueError(f"original_scores[{i}][{j}] = {ori[j]} must be > 0: SSI divides by the original score")
        per_sample.append(np.mean(np.abs(ori - noise) / ori) * 100)
        num_subtexts += len(ori)
    return {"ssi": float(np.mean(per_sample)), "num_samples": len(per_sample), "num_subtexts": num_subtexts}
