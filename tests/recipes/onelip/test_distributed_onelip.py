"""OneLIP over 2 gloo processes (DDP, without `find_unused_parameters`: every trained weight, TRIM-Refine's queries
included, takes part in the forward of `OneLIPForPreTraining`) gives the loss and gradients of one process on the
concatenated batch: the contrastive term (Eq. 1) sees the gathered batch, and the per-text terms (Eq. 3, 7) average
over processes."""

import sys

import pytest
import torch
from accelerate import Accelerator

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor
from helpers.launch import torchrun
from hf_longclip import OneLIPForPreTraining
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.onelip.task import OneLIPTask

WORLD_SIZE = 2

# Every test here launches 2 processes under torch.distributed.run: end to end, slow.
pytestmark = pytest.mark.slow


def _task() -> OneLIPTask:
    clip = tiny_clip()
    return OneLIPTask(OneLIPForPreTraining.from_clip(clip), ImageTextCollator(tiny_onelip_processor()), teacher=clip,
                      trim_top_k=20)


def per_rank_step(reference_path: str) -> None:
    """Run by each of the torchrun processes (see __main__ below)."""
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == WORLD_SIZE
    reference = torch.load(reference_path)
    task = _task()
    model = accelerator.prepare(task.model)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel) and not model.find_unused_parameters
    model.train()
    rank, n = accelerator.process_index, len(reference["batch"]["input_ids"]) // WORLD_SIZE
    local = {k: v[rank * n : (rank + 1) * n] for k, v in reference["batch"].items()}
    loss = sum(task.compute_loss(model, local).values())
    accelerator.backward(loss)  # DDP averages the gradients over processes
    mean_loss = accelerator.reduce(loss.detach(), reduction="mean")
    torch.testing.assert_close(mean_loss, reference["loss"], atol=1e-5, rtol=0)
    for name, param in accelerator.unwrap_model(model).named_parameters():
        torch.testing.assert_close(param.grad, reference["grads"][name], atol=1e-5, rtol=0, msg=name)


def test_two_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    task = _task()
    captions = [f"{caption} number {i}." for i, caption in enumerate(CAPTIONS * 2)]  # 8 distinct texts
    batch = task.collate_fn([{"image": im, "caption": c} for im, c in zip(random_images(len(captions)), captions)])
    task.model.train()
    loss = sum(task.compute_loss(task.model, batch).values())
    loss.backward()
    reference = tmp_path / "reference.pt"
    torch.save({"batch": batch, "loss": loss.detach(),
                "grads": {name: p.grad.clone() for name, p in task.model.named_parameters()}}, reference)
    torchrun(__file__, str(reference))


if __name__ == "__main__":
    per_rank_step(*sys.argv[1:])
