"""What the shared loop trains: a task binds a model, how its batches are built and its objective's hooks.

    task = ContrastiveTask(model, ImageTextCollator(processor))
    model, history = train(task, dataset["train"], args, accelerator)

The loop calls, on every process:
- `compute_loss(model, batch) -> {term: tensor}`: the objective's named terms (their sum is what is
  back-propagated; each term is logged on its own);
- `after_optimizer_step(model, accelerator) -> {name: float}`: updates after each optimizer step (clamping the
  logit scale, updating memory queues), returning values to log;
- `state_dict()` / `load_state_dict(state)`: small objective state that is not a model weight (step counts,
  counters), saved with every checkpoint, one file per process, and restored exactly on resume;
- `save_files(directory, accelerator)` / `restore_files(directory | None, accelerator)`: state too large for a
  state dict (PO-HNM's per-sample queues), copied into each checkpoint's `task_files/` and back on resume;
  `restore_files(None, ...)` initialises it at the start of a fresh run.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import CLIPModel, CLIPTextModel

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

    def save_files(self, directory: Path, accelerator: Accelerator) -> None:
        """Write file-backed state into `directory`, inside a checkpoint being written (default: none)."""

    def restore_files(self, directory: Path | None, accelerator: Accelerator) -> None:
        """Restore file-backed state from a checkpoint's `directory`, or initialise it for a fresh run (None)."""


class ContrastiveTask(Task):
    """A dual encoder trained with its own objective: `forward(return_loss=True).loss_terms`; the logit scale is
    clamped to [0, ln 100] after every optimizer step, as CLIP does."""

    def compute_loss(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        return model(**batch, return_loss=True).loss_terms

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float]:
        return {"logit_scale": clamp_logit_scale(accelerator, model)}


class OneLIPTask(ContrastiveTask):
    """OneLIP's one-stage training (Eq. 10): owns the frozen base text encoder (the teacher), the optimizer-step
    count that selects the loss weights (Sec. 4.1's schedule) and, optionally, PO-HNM's per-sample queues.

    The teacher is training state, not part of the model: held here as a plain attribute, it is no submodule of
    the model, so the optimizer, DDP and DeepSpeed never see it, `save_pretrained` never writes it, and its
    parameters have `requires_grad=False`. It runs in eval mode under `no_grad` on each text's first T_f
    (`text_config.base_length`) tokens and its last hidden states go to `model(..., teacher_hidden_states=...)`.
    `teacher`: a `CLIPModel` (its text tower is taken), a `CLIPTextModel`, or a Hub id / directory of a CLIP; it is
    copied, so the caller's model stays as it was. The step count is saved in every checkpoint (exact resume).

    `hard_negatives` (`hf_longclip.training.hard_negatives.HardNegativeQueues`): PO-HNM (Sec. 3.2) or offline HNM.
    Batches then carry `sample_index` (the rows' dataset indices; `ImageTextCollator(index_column=...)`); each
    image's queued negatives join its contrastive denominator, and in training the batch's due queues are
    refreshed (Eq. 9) with the embeddings of the same forward pass (the validation loss uses no queues). The
    queues are mined at the start of a fresh run and copied into every checkpoint.
    """

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, teacher: str | CLIPModel | CLIPTextModel,
                 hard_negatives=None):
        super().__init__(model, collate_fn)
        self.hard_negatives = hard_negatives
        self.refresh_counts = {"queues_refreshed": 0, "negatives_replaced": 0}
        if isinstance(teacher, str):
            teacher = CLIPModel.from_pretrained(teacher)
        if isinstance(teacher, CLIPModel):
            teacher = teacher.text_model
        self.teacher = copy.deepcopy(teacher).requires_grad_(False).eval()
        self.base_length = model.config.text_config.base_length
        self.step = 0

    def compute_loss(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        inputs = {key: value for key, value in batch.items() if key != "sample_index"}
        input_ids, attention_mask = inputs["input_ids"], inputs.get("attention_mask")
        self.teacher.to(input_ids.device)
        with torch.no_grad():
            teacher_states = self.teacher(
                input_ids=input_ids[:, : self.base_length],
                attention_mask=None if attention_mask is None else attention_mask[:, : self.base_length],
            ).last_hidden_state
        negatives = mask = None
        if self.hard_negatives is not None and model.training:  # the validation loss is plain OneLIP's
            if "sample_index" not in batch:
                raise ValueError("hard-negative queues need each batch's sample_index (the rows' dataset indices): "
                                 "build the collator with index_column")
            negatives, mask = self.hard_negatives.negatives(batch["sample_index"])
        outputs = model(**inputs, return_loss=True, teacher_hidden_states=teacher_states, training_step=self.step,
                        hard_negative_embeds=negatives, hard_negative_mask=mask)
        if self.hard_negatives is not None and model.training:
            counts = self.hard_negatives.refresh(batch["sample_index"], outputs.image_embeds.detach(),
                                                 outputs.text_embeds.detach(), negatives, self.step)
            for key, value in counts.items():
                self.refresh_counts[key] += value
        return outputs.loss_terms

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float]:
        self.step += 1
        updates = super().after_optimizer_step(model, accelerator)
        if self.hard_negatives is not None:
            updates.update(self.refresh_counts)  # totals of this process since the run began
        return updates

    def state_dict(self) -> dict:
        return {"step": self.step, **(self.refresh_counts if self.hard_negatives is not None else {})}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.refresh_counts = {key: state.get(key, 0) for key in self.refresh_counts}

    def save_files(self, directory: Path, accelerator: Accelerator) -> None:
        if self.hard_negatives is not None:
            self.hard_negatives.save(directory / "hard_negatives", accelerator)

    def restore_files(self, directory: Path | None, accelerator: Accelerator) -> None:
        if self.hard_negatives is None:
            return
        if directory is None:
            self.hard_negatives.initialise(accelerator)
        else:
            self.hard_negatives.load(directory / "hard_negatives", accelerator)


class DITMTask(Task):
    """DITM's objective (`hf_longclip.objectives.DITMLoss`, Eq. 7) on any of our dual encoders (DITM, HiMo-CLIP,
    OneLIP): the model's forward gives the L2-normalised embeddings, the task pairs each text with its image
    (`text_image_index`) and applies the objective with the batch's `image_ids` and `descriptiveness`
    (`hf_longclip.data.collate.MultiCaptionCollator` builds such batches).

    Warm-up (Sec. IV-C.2, "we freeze the visual backbone and include the hardest negative mining except for the
    first two epochs"): for the first `warmup_steps` optimizer steps the triplet loss sums over all negatives and
    the parameters of the vision transformer (`vision_model.*`; pooling and projection still train) get no
    gradient, so the optimizer leaves them untouched. Under DDP this needs `ddp_find_unused_parameters`. The step
    count is task state, saved with every checkpoint.
    """

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, objective: torch.nn.Module,
                 warmup_steps: int = 0):
        super().__init__(model, collate_fn)
        self.objective, self.warmup_steps, self.steps_done = objective, warmup_steps, 0
        self._vision_parameters = [param for name, param in model.named_parameters()
                                   if "vision_model." in name and param.requires_grad]

    @property
    def warming_up(self) -> bool:
        return self.steps_done < self.warmup_steps

    def compute_loss(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        warming_up = self.warming_up
        if self._vision_parameters and self._vision_parameters[0].requires_grad == warming_up:  # at a switch only
            for param in self._vision_parameters:
                param.requires_grad_(not warming_up)
        self.objective.hardest_negatives = not warming_up
        outputs = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"),
                        pixel_values=batch["pixel_values"])
        return self.objective(outputs.image_embeds[batch["text_image_index"]], outputs.text_embeds,
                              batch["image_ids"], batch["descriptiveness"])

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float]:
        self.steps_done += 1
        return {"warm_up": float(self.steps_done <= self.warmup_steps)}

    def state_dict(self) -> dict:
        return {"steps_done": self.steps_done}

    def load_state_dict(self, state: dict) -> None:
        self.steps_done = state["steps_done"]
