"""Long-CLIP's fine-tuning objective (Zhang et al., "Long-CLIP: Unlocking the Long-Text Capability of CLIP", ECCV 2024,
Sec. 3.2 "primary component matching"), as its released `CLIP.forward(image, text_long, text_short, rank)` computes it
(github.com/beichenzbc/Long-CLIP, model/model_longclip.py, commit 3966af9): InfoNCE of the images against the long
captions, plus InfoNCE of the images' coarse features (their first principal components over the batch, mean added
back) against the short captions (each long caption's first sentence). HiMo-CLIP's baseline; OneLIP compares with
it too."""

import torch
from torch import nn

from hf_longclip.objectives.losses import check_paired_embeddings, contrastive_loss, gather_rows_with_grad

LONGCLIP_COMPONENTS = 32  # `self.PCA(image_features_long, 32)` in the release
LONGCLIP_LABEL_SMOOTHING = 0.1  # both cross-entropies of both terms in the release


def principal_component_reconstruction(embeds: torch.Tensor, num_components: int) -> torch.Tensor:
    """Long-CLIP's `PCA(X, k)`: (X - mean) V_k V_k^T + mean, V_k the top-k right singular vectors of the centred rows
    (all of them when the batch has fewer; the result is then X itself). Float32; no re-normalisation, as released.

    The number of components is fixed, so every shape is static (no host read). Gradients flow through
    `torch.linalg.svd` as in the release: finite while the batch's singular values are distinct.
    """
    embeds = embeds.float()
    mean = embeds.mean(dim=0, keepdim=True)
    centered = embeds - mean
    top = torch.linalg.svd(centered, full_matrices=False)[2][:num_components]
    return (centered @ top.mT) @ top + mean


class LongCLIPLoss(nn.Module):
    """`{"long_loss": InfoNCE(images, long captions), "short_loss": InfoNCE(PCA_k(images), short captions)}`, both
    symmetric, over the batch gathered with gradient from every process (`torch.distributed.nn.all_gather` in the
    release), label smoothing on every cross-entropy.

    Takes this process's L2-normalised image, long-caption and short-caption embeddings and the exponentiated logit
    scale. The principal components are those of this process's images (the release's `PCA` runs before its
    gather); its reconstruction is not re-normalised. Runs in float32 with autocast disabled.
    """

    def __init__(self, num_components: int = LONGCLIP_COMPONENTS, label_smoothing: float = LONGCLIP_LABEL_SMOOTHING):
        super().__init__()
        if num_components < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.num_components, self.label_smoothing = num_components, label_smoothing

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, short_text_embeds: torch.Tensor,
                logit_scale: torch.Tensor) -> dict:
        check_paired_embeddings(image_embeds, text_embeds)
        check_paired_embeddings(image_embeds, short_text_embeds)
        with torch.autocast(device_type=image_embeds.device.type, enabled=False):
            image, text, short_text = image_embeds.float(), text_embeds.float(), short_text_embeds.float()
            coarse_image = principal_component_reconstruction(image, self.num_components)
            scale = logit_scale.float()
            (all_image, all_text, all_coarse_image, all_short_text), offset = gather_rows_with_grad(
                image, text, coarse_image, short_text)
            return {
                "long_loss": contrastive_loss(image, text, all_image, all_text, scale, offset, self.label_smoothing),
                "short_loss": contrastive_loss(coarse_image, short_text, all_coarse_image, all_short_text, scale,
                                               offset, self.label_smoothing),
            }
