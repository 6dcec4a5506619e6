"""What the shared loop trains: a task binds a model, how its batches are built, its objective and the objective's
state. The model is its architecture; everything training adds (the objective, a teacher, step counts, schedules,
queues) belongs to the task, in open_clip's style:

    outputs = model(**inputs)                      # what the processor gives, nothing else
    terms = objective(outputs.image_embeds, ...)   # a loss over the model's features (plus what the task joins)

    task = ContrastiveTask(model, ImageTextCollator(processor), ClipLoss())
    model, history = train(task, dataset["train"], args, accelerator)

Each model's own task lives in its recipe (`hf_longclip.recipes.<arch>.task`). The loop calls, on every process:
- `compute_loss(model, batch) -> {term: tensor}`: the objective's named terms (their sum is what is
  back-propagated; each term is logged on its own). It is `loss(model, encode(model, batch), batch)` (`device_step`,
  the work `--torch_compile` compiles whole), between two hooks for host work that stays outside it,
  `prepare_step(model, batch) -> batch` and `finish_step(model, batch, encoded)` (PO-HNM's queue reads and refreshes):
  `encode(model, batch) -> {name: tensor}` runs the model (and whatever else sees one sample at a time, such as a
  frozen teacher) and returns per-sample tensors (one row per sample, concatenable across chunks of the batch) and
  the `shared_outputs` (the logit scale: the same for every chunk); `loss` applies the objective to them and to the
  batch. Gradient caching (`--contrastive_batch_size`, `hf_longclip.training.gradient_cache`) encodes the chunks of
  `split_batch(batch, size)` and runs `loss` once on the whole batch;
- `after_optimizer_step(model, accelerator) -> {name: number or scalar tensor}`: updates after each optimizer step
  (clamping the logit scale, updating memory queues), returning values to log (read on the host at logging steps
  only);
- `state_dict()` / `load_state_dict(state)`: small objective state that is not a model weight (step counts,
  counters), saved with every checkpoint, one file per process, and restored exactly on resume;
- `save_files(directory, accelerator)` / `restore_files(directory | None, accelerator)`: state too large for a
  state dict (PO-HNM's per-sample queues), copied into each checkpoint's `task_files/` and back on resume;
  `restore_files(None, ...)` initialises it at the start of a fresh run.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator

MAX_LOGIT_SCALE = math.log(100.0)  # CLIP's clamp of the learned temperature
OPTIONS_FILE = "training_options.json"  # a task's `options()`, written beside each checkpoint it trained


def save_options(task: "Task", directory: str | Path) -> None:
    """Write the task's objective options beside the checkpoint in `directory` (read by `saved_options` and the
    model card)."""
    (Path(directory) / OPTIONS_FILE).write_text(json.dumps(task.options(), indent=2))


def saved_options(model) -> dict:
    """The objective options a checkpoint loaded with `from_pretrained` was trained with ({} if none were saved)."""
    path = Path(getattr(model, "name_or_path", "") or ".") / OPTIONS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def gathered(param: torch.nn.Parameter, modifier_rank: int | None = None):
    """Context in which a ZeRO-3 partitioned parameter holds its full value (a no-op for any other parameter)."""
    if hasattr(param, "ds_id"):
        import deepspeed

        return deepspeed.zero.GatheredParameters([param], modifier_rank=modifier_rank)
    return contextlib.nullcontext()


def clamp_logit_scale(accelerator: Accelerator, model: torch.nn.Module) -> torch.Tensor:
    """Clamp the learned log temperature to [0, ln 100] in place (CLIP) and return exp of it, a tensor: the loop
    reads it on the host only when it logs, so the step itself does not wait for the device."""
    param = accelerator.unwrap_model(model).logit_scale
    with gathered(param, modifier_rank=0), torch.no_grad():
        param.clamp_(0, MAX_LOGIT_SCALE)
        return param.exp().squeeze()


def sum_of_terms(terms: dict[str, torch.Tensor]) -> torch.Tensor:
    """The loss an objective's named terms add up to."""
    return sum(terms.values())


class Task:
    """Base task: a model, the collate function that turns dataset rows into its inputs and the objective that
    `compute_loss` applies to the model's outputs. Subclasses define `compute_loss`; the hooks default to no state
    and nothing to do after a step. `options()` names the objective's hyper-parameters (saved beside each trained
    checkpoint and shown in its model card)."""

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, objective: torch.nn.Module | None = None):
        self.model, self.collate_fn, self.objective = model, collate_fn, objective

    def options(self) -> dict:
        return {}

    #: names of `encode`'s outputs that do not depend on the samples (a logit scale): not concatenated across chunks
    shared_outputs: tuple[str, ...] = ()

    def compute_loss(self, model: torch.nn.Module, batch: dict, device_step: Callable | None = None
                     ) -> dict[str, torch.Tensor]:
        """The terms of `batch`'s loss: host work, `device_step` (default: `self.device_step`; the loop passes a
        compiled one), host work."""
        batch = self.prepare_step(model, batch)
        terms, encoded = (device_step or self.device_step)(model, batch)
        self.finish_step(model, batch, encoded)
        return terms

    def device_step(self, model: torch.nn.Module, batch: dict) -> tuple[dict[str, torch.Tensor], dict]:
        """The step's device work, `encode` then `loss`: (the terms, `encode`'s outputs). With `--torch_compile` the
        loop compiles it whole; it reads nothing on the host."""
        encoded = self.encode(model, batch)
        return self.loss(model, encoded, batch), encoded

    def prepare_step(self, model: torch.nn.Module, batch: dict) -> dict:
        """Host work before a step, outside any compiled region (reading PO-HNM's queues); returns the batch the
        step sees (default: `batch`)."""
        return batch

    def finish_step(self, model: torch.nn.Module, batch: dict, encoded: dict) -> None:
        """Host work after a step's loss, outside any compiled region, given `prepare_step`'s batch and `encode`'s
        outputs for the whole batch (refreshing PO-HNM's queues with them; default: none)."""

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor | None]:
        """What the loss needs from the model for the samples of `batch`: per-sample tensors (first dimension: the
        batch's rows) and `shared_outputs`."""
        raise NotImplementedError(f"{type(self).__name__} defines no `encode` and `loss`: gradient caching "
                                  f"(--contrastive_batch_size) needs both")

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        """The objective's named terms over `encode`'s outputs for the whole `batch`."""
        raise NotImplementedError(f"{type(self).__name__} defines no `encode` and `loss`: gradient caching "
                                  f"(--contrastive_batch_size) needs both")

    def split_batch(self, batch: dict, size: int) -> list[dict]:
        """`batch` cut into consecutive chunks of `size` samples (the last may be smaller): every tensor is cut
        along its first dimension, which must hold one row per sample; other values go to every chunk as they
        are. Tasks whose batches hold several rows of one tensor per sample override it."""
        rows = {key: len(value) for key, value in batch.items() if isinstance(value, torch.Tensor)}
        if len(set(rows.values())) != 1:
            raise ValueError(f"{type(self).__name__} cannot cut a batch whose tensors have different numbers of rows "
                             f"({rows}) into chunks: override split_batch")
        return [{key: value[start:start + size] if key in rows else value for key, value in batch.items()}
                for start in range(0, next(iter(rows.values())), size)]

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float | torch.Tensor]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, but the checkpoint holds {sorted(state)}")

    def save_files(self, directory: Path, accelerator: Accelerator) -> None:
        """Write file-backed state into `directory`, inside a checkpoint being written (default: none)."""

    def restore_files(self, directory: Path | None, accelerator: Accelerator) -> None:
        """Restore file-backed state from a checkpoint's `directory`, or initialise it for a fresh run (None)."""


class ContrastiveTask(Task):
    """A dual encoder trained with a contrastive objective over its L2-normalised embeddings and its logit scale,
    `objective(image_embeds, text_embeds, logit_scale)` (e.g. `hf_longclip.objectives.ClipLoss`); the logit scale
    is clamped to [0, ln 100] after every optimizer step, as CLIP does."""

    shared_outputs = ("logit_scale",)

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        outputs = model(**batch)
        return {"image_embeds": outputs.image_embeds, "text_embeds": outputs.text_embeds,
                "logit_scale": outputs.logit_scale}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        return self.objective(encoded["image_embeds"], encoded["text_embeds"], encoded["logit_scale"])

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float | torch.Tensor]:
        return {"logit_scale": clamp_logit_scale(accelerator, model)}
