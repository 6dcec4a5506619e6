"""DITM's objective (Jang et al., Descriptive Image-Text Matching with Graded Contextual Similarity): an adaptive
triplet loss whose margins grow with the sentences' descriptiveness (Eq. 4-5) plus lambda times a
generic-to-specific ordering loss over the captions of one image (Eq. 6), L = L_AdaTrp + lambda L_Order (Eq. 7)."""

import torch
from torch import nn

from hf_longclip.modeling_common.dual_encoder import check_on_device
from hf_longclip.objectives.losses import check_paired_embeddings, gather_with_grad


def adaptive_triplet_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    all_image_embeds: torch.Tensor,
    all_text_embeds: torch.Tensor,
    same_image: torch.Tensor,
    descriptiveness: torch.Tensor,
    all_descriptiveness: torch.Tensor,
    tau: float = 6.0,
    hardest_negatives: bool = True,
) -> torch.Tensor:
    """Adaptive triplet loss (Eq. 5) of this process's pairs (v_i, t_i) against the global batch, summed:

        [(delta(t_i) + delta(t^-)) / tau - s(v_i, t_i) + s(v_i, t^-)]_+
          + [2 delta(t_i) / tau - s(v_i, t_i) + s(v^-, t_i)]_+

    with s the dot product of L2-normalised embeddings and the margins of Eq. 4. `same_image` (n, N) marks the
    global rows j showing local row i's image: those are positives, never negatives. t^- = argmax s(v_i, t_j) over
    the texts of other images (Eq. 3's definition, by similarity; its delta then sets the margin) and
    v^- = argmax s(v_j, t_i) over the image rows of other images. So every row counts as one pair: an image with
    several captions contributes its image-to-text term once per caption, and its other captions are never its
    negatives. A pair without negatives in the batch contributes 0. With `hardest_negatives=False` (the warm-up of
    Sec. IV-C) each hinge is summed over all negatives instead (VSE++'s sum of violations), each row counted once.

    The hardest negatives are found without gradient and their similarities recomputed from the embeddings (the
    same gradient as through a max, without (n, N) backward work). The loss sums over this process's rows, so
    the sum over processes is the loss of one process on the concatenated batch. With every delta equal to c it
    is VSE++'s loss with margin 2c / tau.
    """
    positive = (image_embeds * text_embeds).sum(dim=-1)
    one_process = all_image_embeds.shape[0] == image_embeds.shape[0]  # then s(v_j, t_i) is the transpose
    if hardest_negatives:
        with torch.no_grad():
            image_to_text = (image_embeds @ all_text_embeds.T).masked_fill_(same_image, float("-inf"))
            hardest_text, text_index = image_to_text.max(dim=1)
            if one_process:
                image_index = image_to_text.max(dim=0).indices
            else:
                text_to_image = (text_embeds @ all_image_embeds.T).masked_fill_(same_image, float("-inf"))
                image_index = text_to_image.max(dim=1).indices
            # both sides at once: rows 0..n-1 the text negatives, n..2n-1 the image negatives
            margins = torch.cat([descriptiveness + all_descriptiveness[text_index], 2 * descriptiveness]) / tau
            has_negative = (hardest_text > float("-inf")).to(positive.dtype).repeat(2)
        anchors = torch.cat([image_embeds, text_embeds])
        # index_select: its backward (index_add_) is several times faster on CPU than indexing's (index_put_)
        negatives = torch.cat([all_text_embeds.index_select(0, text_index),
                               all_image_embeds.index_select(0, image_index)])
        hinges = (margins - positive.repeat(2) + (anchors * negatives).sum(dim=-1)).clamp(min=0)
        return (hinges * has_negative).sum()
    image_to_text = image_embeds @ all_text_embeds.T
    text_to_image = image_to_text.T if one_process else text_embeds @ all_image_embeds.T
    text_margin = (descriptiveness[:, None] + all_descriptiveness[None, :]) / tau
    text_costs = (text_margin - positive[:, None] + image_to_text).clamp(min=0)
    image_costs = (2 * descriptiveness[:, None] / tau - positive[:, None] + text_to_image).clamp(min=0)
    return (text_costs + image_costs).masked_fill(same_image, 0.0).sum()


def ordering_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    all_text_embeds: torch.Tensor,
    same_image: torch.Tensor,
    descriptiveness: torch.Tensor,
    all_descriptiveness: torch.Tensor,
    offset: int = 0,
    descriptiveness_floor: float = 1e-2,
    distance_floor: float = 1e-4,
) -> torch.Tensor:
    """Generic-to-specific ordering loss (Eq. 6), summed over the pairs {t, t^+} of distinct captions of one image:

        {log d(v, t) / d(v, t^+) - log delta(t^+) / delta(t)}^2,

    d the Euclidean distance of L2-normalised embeddings, sqrt(2 - 2 s). It is 0 when the distances are inversely
    proportional to the descriptiveness (the most descriptive caption closest to its image). The term is symmetric
    in t and t^+, so each unordered pair counts once: half the sum over ordered pairs (row i, row j), i != j with
    `same_image[i, j]`, v being row i's image (the same embedding when the rows share one). Eq. 6 is undefined at
    delta = 0 (min-max normalised scores reach it) and at d = 0, so delta is raised to `descriptiveness_floor` and d
    to `distance_floor`. Local row i is global row offset + i; summed over processes it is the loss of one process
    on the concatenated batch.
    """
    rows = torch.arange(same_image.shape[0], device=same_image.device)[:, None] + offset
    pairs = same_image & (torch.arange(same_image.shape[1], device=same_image.device)[None, :] != rows)  # (n, N) mask

    def squared_distance(similarity: torch.Tensor) -> torch.Tensor:
        return (2 - 2 * similarity).clamp(min=distance_floor**2)  # unit vectors: |a - b|^2 = 2 - 2 a.b

    with torch.no_grad():
        delta_squared = descriptiveness.clamp(min=descriptiveness_floor).square()
        all_delta_squared = all_descriptiveness.clamp(min=descriptiveness_floor).square()
        delta_ratio = delta_squared[:, None] / all_delta_squared[None, :]  # (delta(t_i) / delta(t_j))^2
    # residual = log d(v_i, t_i) / d(v_i, t_j) - log delta(t_j) / delta(t_i), in one log of squared ratios, for
    # every (i, j) (all finite): those outside `pairs` are then zeroed, so no shape depends on the data
    own = squared_distance((image_embeds * text_embeds).sum(dim=-1))
    residual = 0.5 * torch.log(own[:, None] * delta_ratio / squared_distance(image_embeds @ all_text_embeds.T))
    return 0.5 * residual.square().masked_fill(~pairs, 0.0).sum()


class DITMLoss(nn.Module):
    """DITM's objective (Eq. 7) over the global batch: `{"triplet_loss": L_AdaTrp (Eq. 4-5), "order_loss":
    order_weight * L_Order (Eq. 6)}` (the order term is absent when `order_weight` is 0). Paper: tau = 6,
    lambda = 0.07; `hardest_negatives=False` is the warm-up of Sec. IV-C (all negatives, first epochs), switched
    by the training script.

    `forward(image_embeds (B, D), text_embeds (B, D), image_ids (B,) or None, descriptiveness (B,))`: one row per
    pair, L2-normalised embeddings, rows with equal image ids showing the same image (positives, never negatives; the
    order term needs at least one image with two captions in the global batch; None: every row its own image),
    descriptiveness in [0, 1]. Every
    input is gathered across processes (embeddings with gradient). Both terms are sums (as VSE++): each process
    returns its rows' share times the number of processes, so that the mean over processes (what DDP's gradient
    averaging and the loop's logging take) is the loss of one process on the concatenated batch.
    Runs in float32 with autocast disabled.
    """

    def __init__(self, tau: float = 6.0, order_weight: float = 0.07, hardest_negatives: bool = True,
                 descriptiveness_floor: float = 1e-2, distance_floor: float = 1e-4):
        super().__init__()
        if tau <= 0:
            raise ValueError(f"tau must be positive, got {tau}")
        self.tau, self.order_weight, self.hardest_negatives = tau, order_weight, hardest_negatives
        self.descriptiveness_floor, self.distance_floor = descriptiveness_floor, distance_floor

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, image_ids: torch.Tensor | None,
                descriptiveness: torch.Tensor) -> dict:
        check_paired_embeddings(image_embeds, text_embeds)
        batch = image_embeds.shape[0]
        descriptiveness = torch.as_tensor(descriptiveness, device=image_embeds.device)
        if image_ids is not None:
            image_ids = torch.as_tensor(image_ids, device=image_embeds.device)
        if image_ids is not None and (image_ids.shape != (batch,) or image_ids.is_floating_point()):
            raise ValueError(f"image_ids must be {batch} integer ids, one per row, got shape {tuple(image_ids.shape)} "
                             f"of {image_ids.dtype}")
        if descriptiveness.shape != (batch,):
            raise ValueError(f"descriptiveness must hold {batch} scores, one per row, got shape "
                             f"{tuple(descriptiveness.shape)}")
        with torch.autocast(device_type=image_embeds.device.type, enabled=False):
            image, text, delta = image_embeds.float(), text_embeds.float(), descriptiveness.float()
            all_image, offset = gather_with_grad(image)
            all_text, _ = gather_with_grad(text)
            all_delta, _ = gather_with_grad(delta)
            if image_ids is None:  # every row its own image: global row numbers
                image_ids = torch.arange(offset, offset + batch, device=image.device)
                all_ids = torch.arange(all_image.shape[0], device=image.device)
            else:
                all_ids, _ = gather_with_grad(image_ids)
            # checked without a host sync (`check_on_device`)
            check_on_device(torch.isfinite(all_image).all() & torch.isfinite(all_text).all(),
                            "image or text embeddings contain NaN or inf")
            check_on_device(((all_delta >= 0) & (all_delta <= 1)).all(),
                            "descriptiveness scores must lie in [0, 1] (min-max normalised, DITM Sec. III-B)")
            same_image = image_ids[:, None] == all_ids[None, :]  # (n, N): positives of each local row
            processes = all_image.shape[0] // batch  # the loop gives every process an equal batch
            terms = {"triplet_loss": processes * adaptive_triplet_loss(
                image, text, all_image, all_text, same_image, delta, all_delta, self.tau, self.hardest_negatives)}
            if self.order_weight == 0:
                return terms
            sorted_ids = all_ids.sort().values
            check_on_device((sorted_ids[1:] == sorted_ids[:-1]).any(),
                            "the ordering loss (DITM Eq. 6) needs several captions per image in the batch, but every "
                            "image id occurs once: sample several captions per image, or set order_weight=0")
            terms["order_loss"] = processes * self.order_weight * ordering_loss(
                image, text, all_text, same_image, delta, all_delta, offset, self.descriptiveness_floor,
                self.distance_floor)
            return terms
