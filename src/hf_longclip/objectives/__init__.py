"""Losses the training loop composes. Each lives in the model file that needs it at run time (remote code must
be self-contained); this package is their one import point for training code."""

from ..models.himo_clip.modeling_himo_clip import (
    contrastive_loss,
    gather_with_grad,
    hide_components,
    molo_loss,
    num_principal_components,
)

__all__ = ["contrastive_loss", "gather_with_grad", "hide_components", "molo_loss", "num_principal_components"]
