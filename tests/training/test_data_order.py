"""The loop's data order (`training.loop.train`, accelerate's `SeedableRandomSampler`) is the one its own
epoch-seeded sampler gave before it: epoch e is `torch.randperm(n)` of a CPU generator seeded with
`seed * 1_000_003 + e`, process p of P takes batches p, p + P, ... of it (the last incomplete group dropped), and a
run stopped mid-epoch and resumed from its checkpoint sees exactly the rest. On one process here, on two (slow:
`torch.distributed.run`, gloo) through this file's `__main__`."""

import json
import sys
from pathlib import Path

import pytest
import torch

from helpers.launch import torchrun
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import train
from hf_longclip.training.task import Task

SAMPLES, BATCH, STEPS, CHECKPOINT = 22, 3, 8, 5  # an epoch: 7 batches, 3 steps of two processes


class Stop(Exception):
    """Raised by `RecordingTask` to end a run mid-epoch, after its checkpoint."""


class RecordingTask(Task):
    """A linear model on the sample indices, recording the indices of every batch it trains on; `stop_after`
    batches end the run (`Stop`)."""

    def __init__(self, stop_after: int | None = None):
        super().__init__(torch.nn.Linear(1, 1), lambda rows: {"index": torch.tensor(rows)})
        self.seen, self.stop_after = [], stop_after

    def compute_loss(self, model, batch, device_step=None):
        if len(self.seen) == self.stop_after:
            raise Stop
        self.seen.append(batch["index"].tolist())
        return {"loss": model(batch["index"].float()[:, None]).square().mean()}


def old_order(seed: int, epoch: int) -> list[int]:
    """The loop's order before accelerate's sampler, from its definition (`EpochShuffleSampler`)."""
    return torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch)).tolist()


def expected_batches(seed: int, processes: int, rank: int) -> list[list[int]]:
    """Process `rank`'s batches over `STEPS` steps in the old order."""
    batches = []
    for epoch in range(STEPS):
        order = old_order(seed, epoch)
        steps = SAMPLES // BATCH // processes
        batches += [order[(step * processes + rank) * BATCH:][:BATCH] for step in range(steps)]
    return batches[:STEPS]


def runs(accelerator, output_dir: Path, seed: int) -> dict[str, list]:
    """The batches of an uninterrupted run, and those of a run stopped after `CHECKPOINT` + 1 steps then resumed
    from its checkpoint at step `CHECKPOINT` (before and after)."""
    args = dict(max_steps=STEPS, per_device_train_batch_size=BATCH, warmup_steps=0, seed=seed, max_grad_norm=0.0)
    stopped, resumed, uninterrupted = RecordingTask(stop_after=CHECKPOINT + 1), RecordingTask(), RecordingTask()
    options = LoopArguments(output_dir=str(output_dir / "resumed"), checkpointing_steps=CHECKPOINT, **args)
    try:
        with pytest.raises(Stop):
            train(stopped, list(range(SAMPLES)), options, accelerator)
        accelerator.free_memory()  # what save_state and load_state see: the run's own model and optimizer
        options.resume_from_checkpoint = "latest"
        train(resumed, list(range(SAMPLES)), options, accelerator)
        accelerator.free_memory()
        train(uninterrupted, list(range(SAMPLES)), LoopArguments(output_dir=str(output_dir / "whole"), **args),
              accelerator)
    finally:
        accelerator.free_memory()
    return {"uninterrupted": uninterrupted.seen, "stopped": stopped.seen, "resumed": resumed.seen}


def check(seen: dict[str, list], seed: int, processes: int, rank: int) -> None:
    expected = expected_batches(seed, processes, rank)
    assert seen["uninterrupted"] == expected
    assert seen["stopped"] == expected[:CHECKPOINT + 1]
    assert seen["resumed"] == expected[CHECKPOINT:]  # the step after the checkpoint, mid-epoch


@pytest.mark.parametrize("seed", [0, 7])
def test_one_process_sees_the_old_order_and_resumes_mid_epoch(accelerator, tmp_path, seed):
    check(runs(accelerator, tmp_path, seed), seed, processes=1, rank=0)


def per_rank(output: str) -> None:
    """Run by each of the torchrun processes (see __main__ below): its batches of `runs`, to `output`/rank_<r>.json."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    seen = runs(accelerator, Path(output), seed=7)
    Path(output, f"rank_{accelerator.process_index}.json").write_text(json.dumps(seen))


@pytest.mark.slow
def test_two_processes_see_the_old_order_and_resume_mid_epoch(tmp_path):
    torchrun(__file__, str(tmp_path))
    for rank in range(2):
        check(json.loads((tmp_path / f"rank_{rank}.json").read_text()), seed=7, processes=2, rank=rank)


if __name__ == "__main__":
    per_rank(*sys.argv[1:])
