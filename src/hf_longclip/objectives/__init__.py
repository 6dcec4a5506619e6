"""Losses shared by the models' objectives, in open_clip's `loss.py` style: pure functions over embeddings (gather
with gradient across processes, InfoNCE, SigLIP's pairwise sigmoid loss; `losses.py`) and `ClipLoss`, a module
returning named terms. Each model's own objective lives in its folder (`hf_longclip.models.<arch>.objective`) and is
applied by its task to the model's outputs; the training loop logs every term.

| objective | terms | paper |
|---|---|---|
| `ClipLoss` | contrastive_loss | CLIP InfoNCE over the gathered batch |
"""

from .clip import ClipLoss
from .losses import check_paired_embeddings, contrastive_loss, gather_with_grad, sigmoid_loss

__all__ = ["ClipLoss", "check_paired_embeddings", "contrastive_loss", "gather_with_grad", "sigmoid_loss"]
