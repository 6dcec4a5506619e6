"""Checks of a processor's captions, shared by the models' processors.

`check_texts` refuses empty or whitespace-only captions and non-strings, naming the caption's index.
`warn_unknown_tokens` warns (the caller keeps it to once) when most of a caption's tokens are unknown to the
tokenizer, e.g. English captions given to a checkpoint whose word-level tokenizer knows only a small vocabulary.
`tokens_cut` and `record_truncation` count the captions truncation cut and by how many tokens (a processor keeps the
count in `truncation_stats`, which `hf-longclip eval` and the training loop report once per run).

This module is part of the models' remote-code bundles, so it imports only the standard library, numpy and torch.
"""

import warnings
from collections.abc import Sequence

import numpy as np
import torch

UNKNOWN_TOKEN_RATE = 0.5  # warn when more than this fraction of a caption's tokens are unknown


class UnknownTokensWarning(UserWarning):
    """Most tokens of a caption are unknown to the processor's tokenizer."""


def check_texts(texts: str | Sequence[str], allow_empty: bool = False) -> None:
    """Raise ValueError naming the index of the first caption of `texts` (a string or a list of them) that is not a
    string, or (unless `allow_empty`) is empty or whitespace only: it would be encoded as the start and end tokens
    alone, an embedding no image matches. The empty text on purpose (HierarCaps's root) needs `allow_empty=True`."""
    items = [texts] if isinstance(texts, str) else texts
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"text must be a string or a list of strings, got {type(texts).__name__}")
    if not items:
        raise ValueError("text is an empty list: pass at least one caption")
    for index, text in enumerate(items):
        if not isinstance(text, str):
            raise ValueError(f"caption {index} is {type(text).__name__} {text!r:.60}, not a string")
        if not allow_empty and not text.strip():
            raise ValueError(
                f"caption {index} is empty or whitespace only ({text!r:.60}): give every image a caption, or pass "
                f"allow_empty_text=True to embed the empty text on purpose"
            )


def _as_padded(rows, fill: int) -> np.ndarray:
    """A tokenizer's output (tensor, array, a list of lists, or one list for a single text) as a 2-D int array,
    ragged lists padded with `fill`."""
    if isinstance(rows, torch.Tensor):
        rows = rows.detach().cpu().numpy()
    if isinstance(rows, np.ndarray):
        return rows.reshape(1, -1) if rows.ndim == 1 else rows
    rows = list(rows)
    if not rows or not isinstance(rows[0], (list, tuple, np.ndarray, torch.Tensor)):
        rows = [rows]
    rows = [np.asarray(row.detach().cpu() if isinstance(row, torch.Tensor) else row) for row in rows]
    out = np.full((len(rows), max((len(row) for row in rows), default=0)), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def unknown_token_rates(tokenizer, input_ids, special_tokens_mask, attention_mask=None) -> np.ndarray | None:
    """Per caption, the fraction of its tokens (neither special nor padding) that are the tokenizer's unknown token;
    NaN for a caption with no such tokens, None when the tokenizer has no unknown token. `special_tokens_mask` (the
    tokenizer's, with `return_special_tokens_mask=True`) tells an unknown token from a special token that shares its
    id (CLIP's tokenizer uses `<|endoftext|>` as its unknown token)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None:
        return None
    ids = _as_padded(input_ids, -1)
    content = _as_padded(special_tokens_mask, 1) == 0
    if attention_mask is not None:
        content &= _as_padded(attention_mask, 0) != 0
    counted = content.sum(axis=1)
    unknown = (content & (ids == unk)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, unknown / np.maximum(counted, 1), np.nan)


def warn_unknown_tokens(
    tokenizer, input_ids, special_tokens_mask, attention_mask=None, threshold: float = UNKNOWN_TOKEN_RATE,
    stacklevel: int = 3,
) -> bool:
    """Warn (an `UnknownTokensWarning`) if, for some caption, more than `threshold` of its tokens are unknown to
    `tokenizer`, naming the first such caption and its rate; returns whether it warned, so that the caller (a
    processor) can warn once and stop checking. Vectorised over the batch."""
    rates = unknown_token_rates(tokenizer, input_ids, special_tokens_mask, attention_mask)
    if rates is None:
        return False
    offending = np.flatnonzero(rates > threshold)
    if offending.size == 0:
        return False
    first = int(offending[0])
    others = f" (and {offending.size - 1} more of the {rates.size} captions)" if offending.size > 1 else ""
    warnings.warn(
        f"{rates[first]:.0%} of the tokens of caption {first}{others} are unknown to this tokenizer (vocabulary of "
        f"{len(tokenizer)} tokens): the model reads each as {tokenizer.unk_token!r}. This checkpoint's tokenizer "
        f"may not suit these captions (a demo checkpoint's tokenizer knows only its training vocabulary). "
        f"Shown once per processor.",
        UnknownTokensWarning,
        stacklevel=stacklevel,
    )
    return True


def new_truncation_stats(max_length: int | None = None) -> dict:
    """An empty count of truncated texts: `texts` tokenized, `truncated` of them cut, `tokens_cut` in all and
    `max_tokens_cut` from one text, at `max_length` tokens."""
    return {"texts": 0, "truncated": 0, "tokens_cut": 0, "max_tokens_cut": 0, "max_length": max_length}


def tokens_cut(tokenizer, texts, input_ids, attention_mask, max_length: int) -> list[int]:
    """Tokens truncation to `max_length` cut from each of `texts` (0 for one that fits). Only the texts whose
    encoding fills `max_length` tokens are tokenized again, untruncated, to count them: the others were not cut."""
    items = [texts] if isinstance(texts, str) else list(texts)
    ids = _as_padded(input_ids, -1)
    if attention_mask is not None:
        lengths = (_as_padded(attention_mask, 0) != 0).sum(axis=1)
    else:
        lengths = (ids != -1).sum(axis=1)
    full = [i for i in range(min(len(items), len(lengths))) if lengths[i] >= max_length]
    cut = [0] * len(items)
    if full:
        whole = tokenizer([items[i] for i in full], truncation=False, verbose=False)["input_ids"]
        for i, row in zip(full, whole):
            cut[i] = max(0, len(row) - max_length)
    return cut


def record_truncation(stats: dict, cuts: Sequence[int], max_length: int | None = None) -> dict:
    """Add one call's `tokens_cut` to `stats` (`new_truncation_stats`), in place; returns it."""
    cuts = [int(c) for c in cuts]
    stats["texts"] += len(cuts)
    stats["truncated"] += sum(1 for c in cuts if c > 0)
    stats["tokens_cut"] += sum(cuts)
    stats["max_tokens_cut"] = max([stats["max_tokens_cut"], *cuts])
    if max_length is not None:
        stats["max_length"] = max_length
    return stats


__all__ = [
    "UNKNOWN_TOKEN_RATE",
    "UnknownTokensWarning",
    "check_texts",
    "new_truncation_stats",
    "record_truncation",
    "tokens_cut",
    "unknown_token_rates",
    "warn_unknown_tokens",
]
