"""HiDe over the global batch: 2 gloo processes give the gradients of one process on the concatenated batch (text
components, and Table 5's HiDe on both modalities)."""

import sys

import pytest
import torch
import torch.nn.functional as F
from accelerate import Accelerator

from helpers.builders import CAPTIONS, himo_task, random_images, tiny_himo, tiny_processor
from helpers.launch import torchrun
from hf_longclip.objectives import contrastive_loss
from hf_longclip.objectives.himo_clip import hide_components

WORLD_SIZE = 2

# Every test here launches 2 processes under torch.distributed.run: end to end, slow.
pytestmark = pytest.mark.slow


def _inputs() -> dict:
    captions = [f"{caption} number {i}." for i, caption in enumerate(CAPTIONS * 2)]  # 8 distinct texts
    return dict(tiny_processor()(text=captions, images=random_images(len(captions)), padding="longest"))


def per_rank_step(reference_path: str, scope: str, modalities: str) -> None:
    """Run by each of the torchrun processes (see __main__ below)."""
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == WORLD_SIZE
    reference = torch.load(reference_path)
    task = himo_task(tiny_himo(seed=0), hide_scope=scope, hide_modalities=modalities)
    model = accelerator.prepare(task.model)
    model.train()
    rank, n = accelerator.process_index, len(reference["inputs"]["input_ids"]) // WORLD_SIZE
    local = {k: v[rank * n : (rank + 1) * n] for k, v in reference["inputs"].items()}
    loss = sum(task.compute_loss(model, local).values())
    accelerator.backward(loss)  # DDP averages the gradients over processes
    mean_loss = accelerator.reduce(loss.detach(), reduction="mean")
    torch.testing.assert_close(mean_loss, reference["loss"], atol=1e-5, rtol=0)
    for name, param in accelerator.unwrap_model(model).named_parameters():
        torch.testing.assert_close(param.grad, reference["grads"][name], atol=1e-5, rtol=0, msg=name)


def _reference(scope: str, modalities: str, tmp_path) -> str:
    inputs = _inputs()
    model = tiny_himo(seed=0)
    model.train()
    if scope == "global":
        loss = sum(himo_task(model, hide_modalities=modalities).compute_loss(model, inputs).values())
    else:  # per-process PCA: components of each half, then contrastive over the whole batch
        out = model(**inputs)
        n = len(inputs["input_ids"]) // WORLD_SIZE
        halves = [hide_components(out.text_embeds[i * n : (i + 1) * n], 0.9) for i in range(WORLD_SIZE)]
        components = F.normalize(torch.cat(halves), dim=-1)
        scale = model.logit_scale.exp()
        image, text = out.image_embeds, out.text_embeds
        loss = (contrastive_loss(image, text, image, text, scale)
                + contrastive_loss(image, components, image, components, scale))
    loss.backward()
    path = tmp_path / f"reference_{scope}_{modalities}.pt"
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    torch.save({"inputs": inputs, "loss": loss.detach(), "grads": grads}, path)
    return str(path)


def _launch(scope: str, tmp_path, modalities: str = "text") -> None:
    """torchrun with 2 CPU processes: accelerate sets up gloo (MULTI_CPU) and wraps the model in DDP."""
    torchrun(__file__, _reference(scope, modalities, tmp_path), scope, modalities)


def test_global_hide_two_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    _launch("global", tmp_path)


def test_global_hide_on_both_modalities_two_processes_equal_one_process(tmp_path):
    _launch("global", tmp_path, modalities="both")


def test_local_hide_runs_pca_per_process(tmp_path):
    _launch("local", tmp_path)


if __name__ == "__main__":
    per_rank_step(*sys.argv[1:])
