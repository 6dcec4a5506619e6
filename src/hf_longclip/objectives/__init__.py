"""Losses shared by the models' objectives, in open_clip's `loss.py` style: pure functions over embeddings (gather
with gradient across processes, InfoNCE, SigLIP's pairwise sigmoid loss; `losses.py`) and `ClipLoss`, a module
returning named terms. Each model's own objective lives in its folder (`hf_longclip.models.<arch>.objective`) and is
applied by its task to the model's outputs; the training loop logs every term.

| objective | terms | paper |
|---|---|---|
| `ClipLoss` | contrastive_loss | CLIP InfoNCE over the gathered batch |
| `models.himo_clip.objective.MoLoLoss` | global_loss, component_loss | HiMo-CLIP Eq. 2-4 (HiDe) |
| `models.onelip.objective.OneLIPLoss` | coarse_loss, token_loss, contrastive_loss | OneLIP Eq. 1, 3-7, 10 |
| `models.ditm.objective.DITMLoss` | triplet_loss, order_loss | DITM Eq. 4-7 |
| `models.fcast.objective.FCASTLoss` | part_loss, whole_loss | F-CAST Eq. 6-8 |
| `models.fcast.objective.FLAIRLoss` | text_conditioned_loss, multi_positive_loss | FLAIR's flat loss (F-CAST Table 2) |
"""

from .clip import ClipLoss
from .losses import check_paired_embeddings, contrastive_loss, gather_with_grad, sigmoid_loss

__all__ = ["ClipLoss", "check_paired_embeddings", "contrastive_loss", "gather_with_grad", "sigmoid_loss"]
