"""CLIP's objective: symmetric InfoNCE over the global batch."""

import torch
from torch import nn

from hf_longclip.objectives.losses import check_paired_embeddings, contrastive_loss, gather_rows_with_grad


class ClipLoss(nn.Module):
    """Symmetric InfoNCE (CLIP; HiMo-CLIP Eq. 2; OneLIP Eq. 1) of L2-normalised embeddings against the batch
    gathered with gradient from every process. Returns `{"contrastive_loss": ...}`."""

    def __init__(self, label_smoothing: float = 0.0):
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor) -> dict:
        check_paired_embeddings(image_embeds, text_embeds)
        (all_image, all_text), offset = gather_rows_with_grad(image_embeds, text_embeds)
        loss = contrastive_loss(image_embeds, text_embeds, all_image, all_text, logit_scale, offset,
                                self.label_smoothing)
        return {"contrastive_loss": loss}


class TULIPLoss(nn.Module):
    """TULIP's second-stage loss (ivonajdenkoska/tulip at 132c174, `open_clip/training/train.py:289-304`): `ClipLoss`
    of the images against their long captions plus `ClipLoss` of the same images against the captions' first
    sentences, unweighted. Returns `{"contrastive_loss": ..., "short_contrastive_loss": ...}`."""

    def __init__(self):
        super().__init__()
        self.clip_loss = ClipLoss()

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, short_text_embeds: torch.Tensor,
                logit_scale: torch.Tensor) -> dict:
        return {"contrastive_loss": self.clip_loss(image_embeds, text_embeds, logit_scale)["contrastive_loss"],
                "short_contrastive_loss": self.clip_loss(image_embeds, short_text_embeds,
                                                         logit_scale)["contrastive_loss"]}
