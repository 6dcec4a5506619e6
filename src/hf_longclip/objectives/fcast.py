"""F-CAST's two-level sigmoid loss (Sec. 3.3, Eq. 6-8): L = L_part + L_whole.

Part level (Eq. 6-7): every sub-caption embedding t_jk queries the image's segment tokens v_i^fine through the
text-grounded attention pooling (FLAIR's AttnPool); the pooled feature v_i,jk is compared with t_jk by a sigmoid
with its own temperature and bias. Pairs follow FLAIR's construction: each image against its own K sub-captions
(positives) and one sub-caption of every other image of the global batch (negatives; image j's is its sub-caption
j mod K), i.e. B x (K + B - 1) pooled features, not B x B x K.

Whole level (Eq. 8): SigLIP's pairwise sigmoid loss between the images' [CLS] embeddings and the long captions'
embeddings (stage 2), with a second temperature and bias.

Both terms are normalised by the number of local images (SigLIP's convention, `sigmoid_loss`); texts are gathered
across processes with gradient, so summed over processes each term is that of one process on the whole batch.
"""

import torch
import torch.nn.functional as F
from torch import nn

from hf_longclip.modeling_common.losses import gather_with_grad, sigmoid_loss


def part_level_queries(sub_embeds: torch.Tensor, all_sub_embeds: torch.Tensor, offset: int) -> torch.Tensor:
    """(B_local, K + B - 1, D): for local image i (global row offset + i), its own K sub-caption embeddings, then
    sub-caption (j mod K) of every other image j of the global batch (B rows of `all_sub_embeds`), in order of j."""
    batch, k = all_sub_embeds.shape[:2]
    local = sub_embeds.shape[0]
    device = sub_embeds.device
    one_each = all_sub_embeds[torch.arange(batch, device=device), torch.arange(batch, device=device) % k]
    own = torch.arange(local, device=device)[:, None] + offset
    others = torch.arange(batch - 1, device=device)[None].expand(local, -1)
    others = others + (others >= own).long()
    return torch.cat([sub_embeds, one_each[others]], dim=1)


def part_level_sigmoid_loss(queries: torch.Tensor, pooled: torch.Tensor, num_positives: int,
                            logit_scale: torch.Tensor, logit_bias: torch.Tensor) -> torch.Tensor:
    """Eq. 7 summed over pairs and divided by the number of images: -sum log sigmoid(y (t cos(v, q) + b)) / B, with
    y = +1 for the first `num_positives` queries of each image and -1 for the rest."""
    logits = logit_scale * F.cosine_similarity(pooled, queries, dim=-1) + logit_bias
    signs = torch.ones_like(logits)
    signs[:, num_positives:] = -1.0
    return -F.logsigmoid(signs * logits).sum() / queries.shape[0]


class FCASTLoss(nn.Module):
    """Returns `{"part_loss": L_part, "whole_loss": L_whole}` (the part term only when `part_weight` > 0, scaled by
    it; 0 is the ablation "F-CAST w/o part alignment" of Table 5).

    `forward(image_embeds (B, D) normalised, long_embeds (B, D) normalised, sub_embeds (B, K, D), segment_tokens
    (B, S, C), segment_padding (B, S) True at padding, pool, part/whole logit scales and biases)`; `pool` is the
    model's text-grounded attention pooling, `pool(queries, tokens, padding) -> (pooled, attention)`."""

    def __init__(self, part_weight: float = 1.0):
        super().__init__()
        self.part_weight = part_weight

    def forward(self, image_embeds, long_embeds, sub_embeds, segment_tokens, segment_padding, pool,
                part_scale, part_bias, whole_scale, whole_bias) -> dict:
        if image_embeds.shape[0] == 0:
            raise ValueError("the two-level sigmoid loss needs a non-empty batch")
        all_long, offset = gather_with_grad(long_embeds)
        terms = {"whole_loss": sigmoid_loss(image_embeds, all_long, whole_scale, whole_bias, offset)}
        if self.part_weight:
            all_sub, _ = gather_with_grad(sub_embeds.flatten(1))
            queries = part_level_queries(sub_embeds, all_sub.view(-1, *sub_embeds.shape[1:]), offset)
            pooled, _ = pool(queries, segment_tokens, segment_padding)
            part = part_level_sigmoid_loss(queries, pooled, sub_embeds.shape[1], part_scale, part_bias)
            terms = {"part_loss": self.part_weight * part, **terms}
        return terms


__all__ = ["FCASTLoss", "part_level_queries", "part_level_sigmoid_loss"]
