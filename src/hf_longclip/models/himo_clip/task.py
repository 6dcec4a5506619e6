"""HiMo-CLIP's training task: MoLo (Eq. 4) over the global batch, HiDe's in-batch PCA of the text embeddings."""

from collections.abc import Callable

import torch
from accelerate import Accelerator
from torch import nn

from hf_longclip.modeling_common.positions import KeptRowsEmbedding
from hf_longclip.models.himo_clip.objective import HIDE_MODALITIES, HIDE_SCOPES, MoLoLoss
from hf_longclip.training.task import ContrastiveTask, gathered


def kept_position_table(model: nn.Module) -> KeptRowsEmbedding | None:
    """The model's text position table if it keeps rows frozen (`HiMoCLIPConfig.frozen_position_rows`), else None."""
    text_model = getattr(model, "text_model", None)
    table = getattr(getattr(text_model, "embeddings", None), "position_embedding", None)
    return table if isinstance(table, KeptRowsEmbedding) and table.kept_rows else None


class HiMoCLIPTask(ContrastiveTask):
    """A HiMo-CLIP (or any dual encoder) trained with `MoLoLoss`; `molo_lambda=0` is plain CLIP training with the
    global InfoNCE alone (the CLIP-77 / CLIP-248 baselines).

    hide_tau: HiDe's explained-variance threshold tau (Sec. 3.2): m is the smallest number of principal components
        whose cumulative explained variance reaches it.
    molo_lambda: weight lambda of the component loss (Eq. 4).
    hide_scope: "global", HiDe's PCA over the whole gathered batch (the paper's batch of 1024 spans 8 GPUs: the
        result does not depend on the number of processes), or "local", each process's own batch as the official
        code does, components gathered afterwards as negatives.
    label_smoothing: of both InfoNCE cross-entropies (the paper: none; the official code: 0.1).
    hide_modalities: "text" (the paper's method) or "both", which also decomposes the image embeddings (Table 5's
        L_comp^{u,v}).
    molo_global: keep the global term (Eq. 2); False trains on the component loss alone (Table 5's L_comp).

    The frozen text position rows (`HiMoCLIPConfig.frozen_position_rows`, Long-CLIP's fine-tuning) get no gradient
    from the model; after each optimizer step the task also writes back their values from the start of training,
    so AdamW's decoupled weight decay leaves them unchanged too, as the official code's `requires_grad=False` does.
    """

    def __init__(self, model: nn.Module, collate_fn: Callable, hide_tau: float = 0.9, molo_lambda: float = 1.0,
                 hide_scope: str = "global", label_smoothing: float = 0.0, hide_modalities: str = "text",
                 molo_global: bool = True):
        if not 0.0 < hide_tau <= 1.0:
            raise ValueError(f"hide_tau must be in (0, 1], got {hide_tau}")
        if molo_lambda < 0:
            raise ValueError(f"molo_lambda must be >= 0, got {molo_lambda}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if hide_scope not in HIDE_SCOPES:
            raise ValueError(f"hide_scope must be one of {HIDE_SCOPES}, got {hide_scope!r}")
        if hide_modalities not in HIDE_MODALITIES:
            raise ValueError(f"hide_modalities must be one of {HIDE_MODALITIES}, got {hide_modalities!r}")
        if not molo_global and molo_lambda == 0:
            raise ValueError("molo_global=False needs molo_lambda > 0: there would be no loss")
        super().__init__(model, collate_fn, MoLoLoss(hide_tau, molo_lambda, hide_scope, label_smoothing,
                                                     hide_modalities, molo_global))
        table = kept_position_table(model)
        if table is not None:
            with gathered(table.weight), torch.no_grad():
                self.kept_positions = table.weight[:table.kept_rows].detach().clone()

    def after_optimizer_step(self, model: nn.Module, accelerator: Accelerator) -> dict:
        table = kept_position_table(accelerator.unwrap_model(model))
        if table is not None:
            with gathered(table.weight, modifier_rank=0), torch.no_grad():
                if self.kept_positions.device != table.weight.device:  # once, after the model moved
                    self.kept_positions = self.kept_positions.to(table.weight.device)
                table.weight[:table.kept_rows].copy_(self.kept_positions)
        return super().after_optimizer_step(model, accelerator)

    def options(self) -> dict:
        objective = self.objective
        return dict(hide_tau=objective.tau, molo_lambda=objective.weight, hide_scope=objective.scope,
                    label_smoothing=objective.label_smoothing, hide_modalities=objective.modalities,
                    molo_global=objective.use_global)


__all__ = ["HiMoCLIPTask"]
