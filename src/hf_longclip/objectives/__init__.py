"""Losses as modules (open_clip's `loss.py` style): each returns a dict of named terms whose sum is the loss.
Each model's task applies them to the model's outputs (`outputs = model(**inputs)`, then the objective over
`outputs.image_embeds`, ...); the training loop logs every term.

| objective | terms | paper |
|---|---|---|
| `ClipLoss` | contrastive_loss | CLIP InfoNCE over the gathered batch |
| `MoLoLoss` | global_loss, component_loss | HiMo-CLIP Eq. 2-4 (HiDe: `hide_components`; Table 5's variants) |
| `OneLIPLoss` | coarse_loss, token_loss, contrastive_loss | OneLIP Eq. 1, 3-7, 10 (TRIM, token distillation; queued hard negatives in Eq. 1) |
| `SigLipLoss` | sigmoid_loss | SigLIP pairwise sigmoid (F-CAST Eq. 7-8) |
| `FCASTLoss` | part_loss, whole_loss | F-CAST Eq. 6-8: text-grounded (AttnPool) part-level and whole-level sigmoid |
| `FLAIRLoss` | text_conditioned_loss, multi_positive_loss | FLAIR's flat loss (F-CAST's Table 2 baseline) |
| `DITMLoss` | triplet_loss, order_loss | DITM Eq. 4-7: adaptive triplet (VSE++ hardest negatives), ordering |

Each module imports only torch and the shared modelling code. Training state beyond the loss (OneLIP's teacher and
step count, PO-HNM's disk-backed queues, DITM's warm-up) belongs to the model's task
(`hf_longclip.models.<arch>.task`).
"""

from .clip import ClipLoss
from .ditm import DITMLoss, adaptive_triplet_loss, ordering_loss
from .fcast import FCASTLoss, FLAIRLoss, part_level_queries, text_grounded_pair_losses, text_grounded_pairs
from .molo import MoLoLoss, hide_components, kept_components, num_principal_components
from .onelip import OneLIPLoss, trim_scores, trim_select
from .sigmoid import SigLipLoss

__all__ = [
    "ClipLoss",
    "DITMLoss",
    "FCASTLoss",
    "FLAIRLoss",
    "MoLoLoss",
    "OneLIPLoss",
    "SigLipLoss",
    "adaptive_triplet_loss",
    "hide_components",
    "kept_components",
    "num_principal_components",
    "ordering_loss",
    "part_level_queries",
    "text_grounded_pair_losses",
    "text_grounded_pairs",
    "trim_scores",
    "trim_select",
]
