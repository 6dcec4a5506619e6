"""Losses shared by the models' objectives, in open_clip's `loss.py` style: pure functions over embeddings (gather
with gradient across processes, InfoNCE, SigLIP's pairwise sigmoid loss; `losses.py`) and the modules returning named
terms that several models use (`ClipLoss`, `LongCLIPLoss`, `TULIPLoss`). A method's own objective, where it has
one, lives in `hf_longclip.objectives.<arch>` (CAST's classifier trains with its logits' cross-entropy, in its task)
and is applied by its task to the model's outputs; the training loop logs every term.

| objective | terms | paper |
|---|---|---|
| `ClipLoss` | contrastive_loss | CLIP InfoNCE over the gathered batch |
| `LongCLIPLoss` | long_loss, short_loss | Long-CLIP: long-caption InfoNCE + short captions against the images' PCA |
| `TULIPLoss` | contrastive_loss, short_contrastive_loss | TULIP's stage 2: InfoNCE on long captions + first sentences |
"""

from hf_longclip.objectives.clip import ClipLoss, TULIPLoss
from hf_longclip.objectives.longclip import LongCLIPLoss, principal_component_reconstruction
from hf_longclip.objectives.losses import (
           check_paired_embeddings,
           contrastive_loss,
           gather_rows_with_grad,
           gather_with_grad,
           sigmoid_loss,
)

__all__ = ["ClipLoss", "LongCLIPLoss", "TULIPLoss", "check_paired_embeddings", "contrastive_loss",
           "gather_rows_with_grad", "gather_with_grad", "principal_component_reconstruction", "sigmoid_loss"]
