"""What the shared loop trains: a task binds a model, how its batches are built and its objective's hooks.

    task = ContrastiveTask(model, ImageTextCollator(processor))
    model, history = train(task, dataset["train"], args, accelerator)

The loop calls, on every process:
- `compute_loss(model, batch) -> {term: tensor}`: the objective's named terms (their sum is what is
  back-propagated; each term is logged on its own);
- `after_optimizer_step(model, accelerator) -> {name: float}`: updates after each optimizer step (clamping the
  logit scale, updating memory queues), returning values to log;
- `state_dict()` / `load_state_dict(state)`: objective state that is not a model weight (e.g. per-sample
  hard-negative queues), saved with every checkpoint, one file per process, and restored exactly on resume.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
from accelerate import Accelerator

MAX_LOGIT_SCALE = math.log(100.0)  # CLIP's clamp of the learned temperature


def gathered(param: torch.nn.Parameter, modifier_rank: int | None = None):
    """Context in which a ZeRO-3 partitioned parameter holds its full value (a no-op for any other parameter)."""
    if hasattr(param, "ds_id"):
        import deepspeed

        return deepspeed.zero.GatheredParameters([param], modifier_rank=modifier_rank)
    return contextlib.nullcontext()


def clamp_logit_scale(accelerator: Accelerator, model: torch.nn.Module) -> float:
    """Clamp the learned log temperature to [0, ln 100] in place (CLIP) and return exp of it."""
    param = accelerator.unwrap_model(model).logit_scale
    with gathered(param, modifier_rank=0), torch.no_grad():
        param.clamp_(0, MAX_LOGIT_SCALE)
        return param.exp().item()


class Task:
    """Base task: a model and the collate function that turns dataset rows into its inputs. Subclasses define
    `compute_loss`; the hooks default to no state and nothing to do after a step."""

    def __init__(self, model: torch.nn.Module, collate_fn: Callable):
        self.model, self.collate_fn = model, collate_fn

    def compute_loss(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, but the checkpoint holds {sorted(state)}")


class ContrastiveTask(Task):
    """A dual encoder trained with its own objective: `forward(return_loss=True).loss_terms`; the logit scale is
    clamped to [0, ln 100] after every optimizer step, as CLIP does."""

    def compute_loss(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        return model(**batch, return_loss=True).loss_terms

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float]:
        return {"logit_scale": clamp_logit_scale(accelerator, model)}
