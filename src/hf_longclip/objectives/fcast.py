"""F-CAST's two-level sigmoid loss (Sec. 3.3, Eq. 6-8), L = L_part + L_whole, and FLAIR's flat loss (Xiao et al.
2025), the baseline F-CAST's Table 2 starts from.

Part level (Eq. 6-7): every sub-caption embedding t_jk queries the image's segment tokens v_i^fine through the
text-grounded attention pooling (FLAIR's AttnPool); the pooled feature v_i,jk is compared with t_jk by a sigmoid
with its own temperature and bias. Pairs follow FLAIR's construction: each image against its own K sub-captions
(positives) and one sub-caption of every other image of the global batch (negatives; image j's is its sub-caption
j mod K), i.e. B x (K + B - 1) pooled features, not B x B x K.

Whole level (Eq. 8): SigLIP's pairwise sigmoid loss between the images' [CLS] embeddings and the long captions'
embeddings (stage 2), with a second temperature and bias.

Both terms are normalised by the number of local images (SigLIP's convention, `sigmoid_loss`); texts are gathered
across processes with gradient, so summed over processes each term is that of one process on the whole batch.

FLAIR's flat loss applies both alignments at the top layer, with one temperature and bias: the text-conditioned
sigmoid loss (L_tcs: the same pairs, pooled over the vision tower's top-layer tokens) and the multi-positive sigmoid
loss (L_mps: the global image embedding against every text of the batch, the image's own texts positive), averaged.
"""

import torch
import torch.nn.functional as F
from torch import nn

from hf_longclip.objectives.losses import gather_with_grad, sigmoid_loss


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


def text_grounded_pair_losses(queries: torch.Tensor, pooled: torch.Tensor, num_positives: int,
                              logit_scale: torch.Tensor, logit_bias: torch.Tensor) -> torch.Tensor:
    """Eq. 7 for every pair, (B_local, K + B - 1): -log sigmoid(y (t cos(v^tg, q) + b)), with y = +1 for the first
    `num_positives` queries of each image and -1 for the rest."""
    logits = logit_scale * F.cosine_similarity(pooled, queries, dim=-1) + logit_bias
    signs = torch.ones_like(logits)
    signs[:, num_positives:] = -1.0
    return -F.logsigmoid(signs * logits)


def text_grounded_pairs(sub_embeds: torch.Tensor, tokens: torch.Tensor, padding: torch.Tensor | None, pool,
                        logit_scale: torch.Tensor, logit_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Eq. 6-7 over FLAIR's pairs: the per-pair losses of this process's images (`text_grounded_pair_losses`), the
    global batch's sub-caption embeddings (B, K, D), gathered with gradient, and this process's first row in it."""
    all_sub, offset = gather_with_grad(sub_embeds.flatten(1))
    all_sub = all_sub.view(-1, *sub_embeds.shape[1:])
    queries = part_level_queries(sub_embeds, all_sub, offset)
    pooled, _ = pool(queries, tokens, padding)
    return text_grounded_pair_losses(queries, pooled, sub_embeds.shape[1], logit_scale, logit_bias), all_sub, offset


def _check_pairs(image_embeds: torch.Tensor, sub_embeds: torch.Tensor) -> None:
    """Image i goes with caption i's sub-captions: the counts must match (a shape check, free)."""
    if sub_embeds.shape[0] != image_embeds.shape[0]:
        raise ValueError(f"the loss pairs image i with the sub-captions of caption i: got {image_embeds.shape[0]} "
                         f"images and {sub_embeds.shape[0]} captions")


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
        _check_pairs(image_embeds, sub_embeds)
        all_long, offset = gather_with_grad(long_embeds)
        terms = {"whole_loss": sigmoid_loss(image_embeds, all_long, whole_scale, whole_bias, offset)}
        if self.part_weight:
            pairs = text_grounded_pairs(sub_embeds, segment_tokens, segment_padding, pool, part_scale, part_bias)[0]
            terms = {"part_loss": self.part_weight * pairs.sum() / image_embeds.shape[0], **terms}
        return terms


class FLAIRLoss(nn.Module):
    """FLAIR's flat loss, L = (L_tcs + L_mps) / 2, returned as `{"text_conditioned_loss": L_tcs / 2,
    "multi_positive_loss": L_mps / 2}`; one temperature and bias serve both terms (FLAIR's single pair).

    `forward(image_embeds (B, D) normalised global image embeddings, sub_embeds (B, K, D) the sub-caption
    embeddings, long_embeds (B, D) normalised t^long of F-CAST's hierarchical encoder or None, tokens (B, S, C) the
    top layer's tokens, padding (B, S) or None, pool, logit scale, logit bias)`. L_mps aligns each image's global
    embedding with its T texts: its K sub-captions, and t^long as one more when given.
    Normalisation as FLAIR's released code: each term is its mean pair loss times the global batch size B (the
    L_tcs sum divided by K + B - 1, the L_mps sum by B x T), so the mean over processes is the one-process loss."""

    def forward(self, image_embeds, sub_embeds, long_embeds, tokens, padding, pool, logit_scale, logit_bias) -> dict:
        if image_embeds.shape[0] == 0:
            raise ValueError("FLAIR's loss needs a non-empty batch")
        _check_pairs(image_embeds, sub_embeds)
        pairs, all_sub, offset = text_grounded_pairs(sub_embeds, tokens, padding, pool, logit_scale, logit_bias)
        batch, texts = all_sub.shape[0], F.normalize(all_sub, dim=-1)
        if long_embeds is not None:
            texts = torch.cat([texts, gather_with_grad(long_embeds)[0][:, None]], dim=1)
        per_image = texts.shape[1]
        logits = logit_scale * image_embeds @ texts.flatten(0, 1).T + logit_bias
        owner = torch.arange(logits.shape[1], device=logits.device) // per_image  # image of each text column
        rows = torch.arange(logits.shape[0], device=logits.device) + offset
        signs = torch.where(owner[None] == rows[:, None], 1.0, -1.0).to(logits.dtype)
        multi_positive = -F.logsigmoid(signs * logits).mean() * batch
        return {"text_conditioned_loss": pairs.mean() * batch / 2, "multi_positive_loss": multi_positive / 2}


__all__ = ["FCASTLoss", "FLAIRLoss", "part_level_queries", "text_grounded_pair_losses", "text_grounded_pairs"]
