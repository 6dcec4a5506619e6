"""SigLIP's objective: pairwise sigmoid loss with a learnable temperature and bias (F-CAST Eq. 7-8)."""

import torch
from torch import nn

from hf_longclip.modeling_common.losses import check_paired_embeddings, gather_with_grad, sigmoid_loss


class SigLipLoss(nn.Module):
    """Pairwise sigmoid loss of each local image against every text of the global batch (texts gathered with
    gradient). `logit_scale` is the exponentiated temperature t and `logit_bias` the bias b, both owned by the model.
    Returns `{"sigmoid_loss": ...}`."""

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor,
                logit_bias: torch.Tensor) -> dict:
        check_paired_embeddings(image_embeds, text_embeds)
        all_text, offset = gather_with_grad(text_embeds)
        return {"sigmoid_loss": sigmoid_loss(image_embeds, all_text, logit_scale, logit_bias, offset)}
