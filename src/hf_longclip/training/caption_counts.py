"""How many training texts the processor cut to the model's length, and by how much: counted where batches are
collated (in the data-loader workers), carried to the training loop with each batch, summed over the processes at
logging steps (`texts_truncated`, `text_tokens_cut` in the history) and reported in one log line per run."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..modeling_common.captions import new_truncation_stats

SUMMED = ("texts", "truncated", "tokens_cut")


def _stats(collate_fn) -> dict | None:
    """The `truncation_stats` of the processor `collate_fn` tokenizes with (our collators keep it as `processor`),
    or None for one without a text processor."""
    processor = getattr(collate_fn, "processor", None)
    return getattr(processor, "truncation_stats", None)


def counted_collate(collate_fn, rows: list) -> tuple[object, dict]:
    """(`collate_fn(rows)`, what its processor's truncation count grew by: `texts`, `truncated`, `tokens_cut`, and
    the largest cut this worker has seen, `max_tokens_cut`)."""
    before = dict(_stats(collate_fn) or {})
    batch = collate_fn(rows)
    after = _stats(collate_fn) or {}
    delta = {key: int(after.get(key, 0)) - int(before.get(key, 0)) for key in SUMMED}
    delta["max_tokens_cut"], delta["max_length"] = int(after.get("max_tokens_cut", 0)), after.get("max_length")
    return batch, delta


@dataclass
class CaptionCountingCollator:
    """A task's collate function returning (batch, its truncation counts: `counted_collate`)."""

    collate_fn: object

    def __call__(self, rows: list):
        return counted_collate(self.collate_fn, rows)


def add_counts(total: dict, delta: dict) -> dict:
    """Add one batch's counts to the run's (`new_truncation_stats`), in place."""
    for key in SUMMED:
        total[key] += delta.get(key, 0)
    total["max_tokens_cut"] = max(total["max_tokens_cut"], delta.get("max_tokens_cut", 0))
    total["max_length"] = delta.get("max_length") or total.get("max_length")
    return total


def new_counts() -> dict:
    return new_truncation_stats()


def all_processes(total: dict, accelerator) -> dict:
    """The counts of every process (a collective: call it on every process)."""
    if accelerator.num_processes == 1:
        return dict(total)
    device = accelerator.device
    summed = accelerator.reduce(torch.tensor([total[key] for key in SUMMED], device=device), reduction="sum")
    largest = accelerator.gather(torch.tensor([total["max_tokens_cut"]], device=device)).max()
    return {**dict(zip(SUMMED, (int(value) for value in summed.tolist()))), "max_tokens_cut": int(largest.item()),
            "max_length": total.get("max_length")}
