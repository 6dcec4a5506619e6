"""Training batches streamed from WebDataset shards (`--train_shards`): each process reads its own shards, an epoch
ends for all processes together, and the position in the stream is part of a checkpoint for exact resume."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from accelerate import Accelerator

from ..data.shards import SHARD_PACKAGES, SKIPPED, ShardStream, expand_shards
from ..modeling_common.optional import require
from .arguments import LoopArguments
from .caption_counts import add_counts, counted_collate, new_counts


class StreamedBatches:
    """Training batches streamed from WebDataset shards (`args.train_shards`, see `hf_longclip.data.shards`): this
    process's shards through torchdata's `StatefulDataLoader` (`args.dataloader_num_workers` workers decode and
    collate), moved to the device. An epoch ends for every process when one of them runs out (one all-reduce of a
    flag per batch: shards need not hold equal counts and corrupt samples are skipped), and `len()` is the estimate
    from the shards' manifest that sizes the learning-rate schedule. `state_dict` holds the loader's per-worker
    positions, the count of corrupt samples skipped and that of the texts the processor cut (`caption_counts`,
    `training.caption_counts`), for exact resume."""

    def __init__(self, args: LoopArguments, collate_fn, accelerator: Accelerator):
        # torchdata (the extra `hf-longclip[shards]`), checked before the shards are read
        stateful = require("torchdata.stateful_dataloader", "shards", SHARD_PACKAGES, "streamed WebDataset shards")
        urls = expand_shards(args.train_shards)
        rank, world = accelerator.process_index, accelerator.num_processes
        self.stream = ShardStream(urls, rank, world, seed=args.seed, buffer_size=args.shuffle_buffer,
                                  checksum=args.verify_shards)  # verified against the manifest first
        self.loader = stateful.StatefulDataLoader(
            self.stream, batch_size=args.process_batch_size, num_workers=args.dataloader_num_workers,
            collate_fn=_CountingCollator(collate_fn), drop_last=True,
            generator=torch.Generator().manual_seed(args.seed),  # worker seeds: not drawn from the training RNG
        )
        # datasets deals each process len(urls) / world shards anew each epoch (after shuffling their order): the
        # smallest share it can get is the sum of the smallest shards
        smallest = sum(sorted(self.stream.sample_counts)[: len(urls) // world])
        workers = max(1, args.dataloader_num_workers)  # each drops its last partial batch
        self.estimated_batches = smallest // args.process_batch_size - (workers - 1)
        if self.estimated_batches < 1:
            raise ValueError(f"{smallest} samples in the smallest process's shards make no full batch of "
                             f"{args.process_batch_size} per worker ({workers} workers)")
        self.accelerator, self.corrupt_samples, self.caption_counts = accelerator, 0, new_counts()

    def __len__(self) -> int:
        return self.estimated_batches

    def epoch(self, epoch: int):
        """The batches of `epoch` (from the resume point if a state was loaded), on the device."""
        self.stream.set_epoch(epoch)
        device = self.accelerator.device
        for batch, skipped, captions in _until_any_process_ends(iter(self.loader), self.accelerator):
            self.corrupt_samples += skipped
            add_counts(self.caption_counts, captions)
            yield {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}

    def state_dict(self) -> dict:
        return {"loader": self.loader.state_dict(), "corrupt_samples": self.corrupt_samples,
                "caption_counts": dict(self.caption_counts)}

    def load_state_dict(self, state: dict, epoch: int) -> None:
        self.stream.set_epoch(epoch)
        self.loader.load_state_dict(state["loader"])
        self.corrupt_samples = state["corrupt_samples"]
        self.caption_counts = dict(state["caption_counts"])


@dataclass
class _CountingCollator:
    """The task's collate function on streamed rows, returning (batch, corrupt samples skipped before them, the
    truncation counts of its texts: `caption_counts.counted_collate`)."""

    collate_fn: object

    def __call__(self, rows: list[dict]):
        skipped = sum(row.pop(SKIPPED) for row in rows)
        batch, captions = counted_collate(self.collate_fn, rows)
        return batch, skipped, captions


def _until_any_process_ends(iterator, accelerator: Accelerator):
    """Items of `iterator` while every process still has one."""
    while True:
        item = next(iterator, None)
        alive = torch.tensor([item is not None], dtype=torch.int64, device=accelerator.device)
        if accelerator.num_processes > 1:
            alive = accelerator.reduce(alive, reduction="sum") // accelerator.num_processes
        if not alive.item():
            return
        yield item
