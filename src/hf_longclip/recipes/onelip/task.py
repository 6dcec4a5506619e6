"""OneLIP's training task: Eq. 10 with the frozen base encoder as teacher, its weight schedule, and PO-HNM's
per-sample hard-negative queues (Sec. 3.2)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import CLIPModel, CLIPTextModel

from hf_longclip.models.onelip.modeling_onelip import OneLIPForPreTraining, text_token_mask
from hf_longclip.objectives.onelip import TRIM_DECOMPOSITIONS, OneLIPLoss
from hf_longclip.training.task import ContrastiveTask


class OneLIPTask(ContrastiveTask):
    """OneLIP's one-stage training (Eq. 10) of a `OneLIPForPreTraining` (`OneLIPModel` and TRIM-Refine's queries):
    owns the frozen base text encoder (the teacher), the optimizer-step count that selects the loss weights (Sec.
    4.1's schedule) and, optionally, PO-HNM's per-sample queues. The model's forward runs TRIM-Select, with the
    objective's options passed as its `trim_*` arguments (`OneLIPLoss.token_selection`), and TRIM-Refine, so every
    trained weight takes part in it.

    The teacher is training state, not part of the model: held here as a plain attribute, it is no submodule of
    the model, so the optimizer, DDP and DeepSpeed never see it, `save_pretrained` never writes it, and its
    parameters have `requires_grad=False`. It runs in eval mode under `no_grad` on each text's first T_f
    (`text_config.base_length`) tokens and its last hidden states join the model's outputs in the objective.
    `teacher`: a `CLIPModel` (its text tower is taken), a `CLIPTextModel`, or a Hub id / directory of a CLIP; it is
    copied, so the caller's model stays as it was. The step count is saved in every checkpoint (exact resume).

    `hard_negatives` (`hf_longclip.recipes.onelip.hard_negatives.HardNegativeQueues`): PO-HNM (Sec. 3.2) or offline HNM.
    Batches then carry `sample_index` (the rows' dataset indices; `ImageTextCollator(index_column=...)`); each
    image's queued negatives join its contrastive denominator, and in training the batch's due queues are
    refreshed (Eq. 9) with the embeddings of the same forward pass (the validation loss uses no queues). The
    queues are mined at the start of a fresh run and copied into every checkpoint.

    The objective's options (`OneLIPLoss`; defaults from Sec. 4.1):

    trim_alpha (defaults to 0.5):
        alpha of S(i) = (1 - alpha) I(i) + alpha A(i) (Eq. 5).
    trim_top_k (defaults to 100):
        K, the number of tokens TRIM-Select keeps (texts with fewer valid tokens keep them all).
    trim_rank (defaults to 8):
        r, the number of singular directions of the structural importance I(i) (Eq. 4). The paper gives no value.
        8 is small enough that I(i) measures a token's share of the dominant components rather than its norm (with
        every direction, sum_j U_ij^2 sigma_j^2 = |z_i|^2, and after the final LayerNorm all tokens have nearly the
        same norm), and large enough to reach past the first direction, which CLIP's token states share.
    trim_decomposition (defaults to `"auto"`):
        How TRIM-Select finds the top r singular directions: `"exact"` (float64 `eigh` of each text's Gram matrix),
        `"subspace"` (float32 subspace iteration, matrix products: fast on GPUs) or `"auto"` (exact on CPU, subspace
        elsewhere); see `hf_longclip.objectives.onelip.top_right_singular_vectors`.
    weight_switch_step (defaults to 5000):
        The optimizer step at which the weights switch (counted by the task, saved with every checkpoint).
    token_distillation (defaults to `"trim"`):
        `"trim"`: TRIM-Select + TRIM-Refine + token-wise distillation (Eq. 4-7), OneLIP. `"pooled"`: the ablation
        without TRIM (mean-pooled student vs teacher states, see `hf_longclip.objectives.onelip`); TRIM-Refine's
        output is then unused and its queries frozen.
    weights, weights_after (defaults to (0.2, 0.1, 0.7) and (0.05, 0.25, 0.7)):
        (lambda_1, lambda_2, lambda_3) of Eq. 10 before and from `weight_switch_step` on.
    """

    #: batch entries that are no model inputs: the rows' dataset indices and `prepare_step`'s queued negatives
    TASK_INPUTS = ("sample_index", "hard_negative_embeds", "hard_negative_mask")

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, teacher: str | CLIPModel | CLIPTextModel,
                 hard_negatives=None, trim_alpha: float = 0.5, trim_top_k: int = 100, trim_rank: int = 8,
                 trim_decomposition: str = "auto", weights: tuple[float, float, float] = (0.2, 0.1, 0.7),
                 weights_after: tuple[float, float, float] = (0.05, 0.25, 0.7), weight_switch_step: int = 5000,
                 token_distillation: str = "trim"):
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under a LoRA wrapper
        if not isinstance(base, OneLIPForPreTraining):
            raise TypeError(f"OneLIPTask trains a OneLIPForPreTraining (OneLIPModel with TRIM-Refine's queries), got "
                            f"{type(base).__name__}: build it with OneLIPForPreTraining.from_clip(...) or "
                            f"OneLIPForPreTraining.from_pretrained(...)")
        if not 0.0 <= trim_alpha <= 1.0:
            raise ValueError(f"trim_alpha must be in [0, 1], got {trim_alpha}")
        if trim_top_k < 1 or trim_rank < 1:
            raise ValueError(f"trim_top_k and trim_rank must be >= 1, got {trim_top_k} and {trim_rank}")
        if min(*weights, *weights_after) < 0:
            raise ValueError(f"Eq. 10's weights must be >= 0, got {weights} and {weights_after}")
        if weight_switch_step < 0:
            raise ValueError(f"weight_switch_step must be >= 0, got {weight_switch_step}")
        if token_distillation not in OneLIPLoss.DISTILLATIONS:
            raise ValueError(f"token_distillation must be one of {OneLIPLoss.DISTILLATIONS}, got "
                             f"{token_distillation!r}")
        if trim_decomposition not in TRIM_DECOMPOSITIONS:
            raise ValueError(f"trim_decomposition must be one of {TRIM_DECOMPOSITIONS}, got {trim_decomposition!r}")
        objective = OneLIPLoss(trim_alpha, trim_top_k, trim_rank, weights, weights_after, weight_switch_step,
                               token_distillation, trim_decomposition)
        super().__init__(model, collate_fn, objective)
        if token_distillation == "pooled":  # no gradient would reach them: keep them out of the optimizer
            model.trim_refine.requires_grad_(False)
        self.hard_negatives = hard_negatives
        self.refresh_counts = {"queues_refreshed": 0, "negatives_replaced": 0}
        if isinstance(teacher, str):
            teacher = CLIPModel.from_pretrained(teacher)
        if isinstance(teacher, CLIPModel):
            teacher = teacher.text_model
        self.teacher = copy.deepcopy(teacher).requires_grad_(False).eval()
        self.teacher_placement = None  # (device, dtype), set by prepare_step
        self.base_length = model.config.text_config.base_length
        self.eos_token_id = model.config.text_config.eos_token_id
        self.step = 0

    def options(self) -> dict:
        objective = self.objective
        return {"trim_alpha": objective.alpha, "trim_top_k": objective.top_k, "trim_rank": objective.rank,
                "trim_decomposition": objective.decomposition, "weights": objective.weights,
                "weights_after": objective.weights_after, "weight_switch_step": objective.switch_step,
                "token_distillation": objective.distillation,
                "hard_negatives": None if self.hard_negatives is None else self.hard_negatives.options()}

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        """The model's embeddings, long-text token states and TRIM-Refine's output over the tokens TRIM-Select kept,
        and the teacher's token states on each text's first T_f tokens."""
        inputs = {key: value for key, value in batch.items() if key not in self.TASK_INPUTS}
        input_ids, attention_mask = inputs["input_ids"], inputs.get("attention_mask")
        with torch.no_grad():
            teacher_states = self.teacher(
                input_ids=input_ids[:, : self.base_length],
                attention_mask=None if attention_mask is None else attention_mask[:, : self.base_length],
            ).last_hidden_state
        outputs = model(**inputs, **self.objective.token_selection())
        return {"image_embeds": outputs.image_embeds, "text_embeds": outputs.text_embeds,
                "logit_scale": outputs.logit_scale, "text_states": outputs.text_model_output.last_hidden_state,
                "refined_states": outputs.refined_text_states, "teacher_states": teacher_states}

    def prepare_step(self, model: torch.nn.Module, batch: dict) -> dict:
        """The teacher put on the model's device and in its weights' dtype (bf16 under DeepSpeed's bf16; fp32 weights
        under autocast, which computes in the autocast dtype), outside the compiled step; in training with queues, the
        batch with each sample's queued hard negatives (`hard_negative_embeds`, `hard_negative_mask`: host reads of
        the queues)."""
        weight = next(model.parameters())
        if self.teacher_placement != (weight.device, weight.dtype):
            self.teacher.to(weight.device, weight.dtype)
            self.teacher_placement = (weight.device, weight.dtype)
        if self.hard_negatives is None or not model.training:  # the validation loss is plain OneLIP's
            return batch
        if "sample_index" not in batch:
            raise ValueError("hard-negative queues need each batch's sample_index (the rows' dataset indices): "
                             "build the collator with index_column")
        negatives, mask = self.hard_negatives.negatives(batch["sample_index"])
        return {**batch, "hard_negative_embeds": negatives, "hard_negative_mask": mask}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        """Eq. 10 over the batch, with its queued hard negatives (`prepare_step`)."""
        return self.objective(
            encoded["image_embeds"], encoded["text_embeds"], encoded["logit_scale"], encoded["text_states"],
            text_token_mask(batch["input_ids"], batch.get("attention_mask"), self.eos_token_id),
            encoded["teacher_states"], encoded["refined_states"], self.step, batch.get("hard_negative_embeds"),
            batch.get("hard_negative_mask"),
        )

    def finish_step(self, model: torch.nn.Module, batch: dict, encoded: dict) -> None:
        """In training with queues, the batch's due queues are refreshed (Eq. 9) with the step's embeddings."""
        if "hard_negative_embeds" not in batch:
            return
        counts = self.hard_negatives.refresh(batch["sample_index"], encoded["image_embeds"].detach(),
                                             encoded["text_embeds"].detach(), batch["hard_negative_embeds"],
                                             self.step)
        for key, value in counts.items():
            self.refresh_counts[key] += value

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float | torch.Tensor]:
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


__all__ = ["OneLIPTask", "text_token_mask"]
