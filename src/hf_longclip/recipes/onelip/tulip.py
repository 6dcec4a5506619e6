"""TULIP's two-stage adaptation (Najdenkoska et al., "TULIP: Token-length Upgraded CLIP"), the multi-stage pipeline
OneLIP's one stage is compared with, as released (ivonajdenkoska/tulip at commit 132c174):

1. distillation (`open_clip/training/train_distill.py`, `main_distill_rope.py`): a RoPE text encoder, initialised
   from the CLIP text encoder, is trained to reproduce the frozen CLIP's projected text embedding (`encode_text`)
   of the same captions, cut at the teacher's 77 tokens; the image tower is untouched. Loss `cosine` (the release's
   run script), `mse` or `l2` (`distillation_loss`);
2. contrastive fine-tuning (`train_context_finetune.py`, `main_context_finetune_rope.py`) of the distilled text
   encoder with CLIP's image tower on the long captions, the rotary frequencies NTK-scaled.

Both stages train an `OneLIPModel` (CLIP's image tower and a RoPE text encoder, the architecture of TULIP's
`TextTransformerRoPE`, see `convert_tulip`). Choices:

- stage 1 runs plain RoPE (`rope_ntk_scaling=False`), as the release's student does; stage 2 turns on the NTK
  scaling of `OneLIPTextConfig` (gamma 8, T_f = 77 to T_g: Sec. 4.1 of OneLIP, TULIP's formula
  `precompute_freqs_cis_dynamic_ntk_scaling` with its default factor 8), so the two methods differ in their
  pipeline, not in their position scaling;
- stage 2 starts from the base CLIP's text projection, not the distilled one: the release replaces CLIP's token
  embedding, transformer and final LayerNorm by the student's and keeps CLIP's `text_projection`;
- stage 1 trains the text tower and the text projection (the student's parameters); the image tower, image
  projection and logit scale are frozen, so the optimizer never sees them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import CLIPModel

from hf_longclip.models.onelip.modeling_onelip import OneLIPModel, inverse_frequencies
from hf_longclip.training.task import Task

DISTILLATION_LOSSES = ("cosine", "mse", "l2")


def distillation_loss(teacher_embeds: torch.Tensor, student_embeds: torch.Tensor, loss_type: str = "cosine"):
    """TULIP's stage-1 loss between the teacher's and the student's (B, D) projected text embeddings (not
    normalised): `cosine` 1 - mean cosine, `mse` the mean squared error over every entry, `l2` the mean over texts
    of the Euclidean distance."""
    if loss_type not in DISTILLATION_LOSSES:
        raise ValueError(f"loss_type must be one of {DISTILLATION_LOSSES}, got {loss_type!r}")
    if teacher_embeds.shape != student_embeds.shape:
        raise ValueError(f"teacher and student embeddings differ in shape: {tuple(teacher_embeds.shape)} vs "
                         f"{tuple(student_embeds.shape)}")
    teacher, student = teacher_embeds.float(), student_embeds.float()
    if loss_type == "mse":
        return F.mse_loss(student, teacher)
    if loss_type == "l2":
        return (teacher - student).norm(dim=-1).mean()
    return 1 - F.cosine_similarity(teacher, student, dim=-1).mean()


def set_rope_scaling(model: OneLIPModel, ntk_scaling: bool, max_length: int | None = None) -> OneLIPModel:
    """Switch the text encoder's rotary frequencies between plain RoPE and NTK scaling, and optionally its longest
    text T_g (`max_length`), in its configuration and in its frequency buffer (which every checkpoint records)."""
    for config in (model.config.text_config, model.text_model.config):
        config.rope_ntk_scaling = ntk_scaling
        if max_length is not None:
            config.max_position_embeddings = max_length
    rotary = model.text_model.rotary
    with torch.no_grad():
        rotary.inv_freq.copy_(inverse_frequencies(model.config.text_config).to(rotary.inv_freq))
    return model


def distillation_student(clip: CLIPModel, max_length: int) -> OneLIPModel:
    """Stage 1's model: an `OneLIPModel` from `clip` with plain RoPE, its image side (tower, projection, logit
    scale) frozen."""
    model = set_rope_scaling(OneLIPModel.from_clip(clip, max_length=max_length), ntk_scaling=False)
    for module in (model.vision_model, model.visual_projection):
        module.requires_grad_(False)
    model.logit_scale.requires_grad_(False)
    return model


def finetuning_model(distilled: OneLIPModel, clip: CLIPModel) -> OneLIPModel:
    """Stage 2's model: the distilled one, every weight trainable, NTK-scaled, with `clip`'s text projection back (as
    the release builds its stage-2 model)."""
    model = set_rope_scaling(distilled, ntk_scaling=True).requires_grad_(True)
    with torch.no_grad():
        model.text_projection.weight.copy_(clip.text_projection.weight)
    return model


class TULIPDistillationTask(Task):
    """TULIP's stage 1 (`distillation_loss`) on batches of captions cut at the teacher's 77 tokens (the model's
    processor built with `max_length=77`). The teacher, a frozen copy of `teacher`'s text tower and projection
    (CLIP's `encode_text`), is training state held here, not part of the model; its embeddings and the student's
    projected end-of-text embeddings are what the loss compares. The student's forward runs the frozen image tower
    too (the batch carries images), with no gradient reaching it."""

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, teacher: CLIPModel, loss_type: str = "cosine"):
        if loss_type not in DISTILLATION_LOSSES:
            raise ValueError(f"loss_type must be one of {DISTILLATION_LOSSES}, got {loss_type!r}")
        super().__init__(model, collate_fn)
        self.loss_type = loss_type
        self.teacher = copy.deepcopy(teacher).requires_grad_(False).eval()

    def options(self) -> dict:
        return {"stage": "tulip-distillation", "loss_type": self.loss_type}

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        self.teacher.to(batch["input_ids"].device)
        with torch.no_grad():
            teacher_embeds = self.teacher.get_text_features(
                input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).pooler_output
        outputs = model(**batch)
        student_embeds = outputs.text_model_output.pooler_output
        return {"teacher_embeds": teacher_embeds, "student_embeds": student_embeds}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        return {"distillation_loss": distillation_loss(encoded["teacher_embeds"], encoded["student_embeds"],
                                                       self.loss_type)}


__all__ = ["DISTILLATION_LOSSES", "TULIPDistillationTask", "distillation_loss", "distillation_student",
           "finetuning_model", "set_rope_scaling"]
