"""Where the cumulative caption prefixes t_1..t_K of HiMo@K end (HiMo-CLIP Sec. 4.2), in sentences split by
`modeling_common.text.split_sentences`."""

from __future__ import annotations


def segment_ends(n: int, k: int) -> list[int]:
    """Number of sentences in each cumulative prefix t_1..t_K when n sentences are cut into K contiguous segments
    (HiMo-CLIP Sec. 4.2): n // K sentences each, the remainder n % K going one each to the last segments
    (n=5, K=3 -> [1, 3, 5])."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got k={k}")
    if n < k:
        raise ValueError(f"need at least k={k} sentences to build {k} segments, got {n}")
    base, remainder = divmod(n, k)
    ends, end = [], 0
    for index in range(k):
        end += base + (1 if index >= k - remainder else 0)
        ends.append(end)
    return ends

