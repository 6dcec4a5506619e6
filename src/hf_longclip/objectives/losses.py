"""Contrastive losses over the global batch, shared by the models' objectives: gather with gradient, InfoNCE,
SigLIP's pairwise sigmoid loss. Pure functions of embeddings (torch only); training code, never in remote code."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers.utils import is_tracing

from hf_longclip.modeling_common.dual_encoder import pairwise_sigmoid_loss

# The process group whose batch sizes were found equal, and the local row counts checked in it (`_check_equal_rows`)
_agreed: dict = {"group": None, "rows": set()}


def _check_equal_rows(tensor: torch.Tensor) -> None:
    """Raise a ValueError unless every process gathers as many rows as this one: the sizes are exchanged and read on
    the host (a synchronisation) the first time this process gathers `tensor.shape[0]` rows in the current process
    group (the first step, or a new batch size, on every process at once), and trusted afterwards, as in a compiled
    step: the loop gives every process equal batches (`drop_last`, accelerate's even batches). A process whose batch
    size alone changed to one already checked would not be caught (the others' sizes are not read again)."""
    group = dist.group.WORLD
    if _agreed["group"] is not group:  # a new process group (kept referenced: its id is not reused meanwhile)
        _agreed.update(group=group, rows=set())
    key = (tensor.device, tensor.shape[0])
    if key in _agreed["rows"]:
        return
    sizes = [torch.zeros(1, dtype=torch.long, device=tensor.device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([tensor.shape[0]], device=tensor.device))
    sizes = [int(s) for s in sizes]
    if len(set(sizes)) != 1:
        raise ValueError(f"every process must contribute the same batch size to the contrastive loss, got {sizes}")
    _agreed["rows"].add(key)


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All-gather rows across processes keeping autograd; returns the global tensor and this rank's row offset.

    `torch.distributed.nn.functional.all_gather` back-propagates into every shard (accelerate's `gather` does not).
    Every process must contribute the same number of rows; in eager mode a mismatch is an error, not a silent
    misalignment: the sizes are exchanged and read on the host once per batch size (`_check_equal_rows`), so that
    the steps after the first do not wait for the device; in a compiled step that check, a host read, is left out:
    the training loop gives every process equal batches.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor, 0
    from torch.distributed.nn.functional import all_gather

    if not is_tracing(tensor):
        _check_equal_rows(tensor)
    return torch.cat(all_gather(tensor)), dist.get_rank() * tensor.shape[0]


def gather_rows_with_grad(*tensors: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], int]:
    """`gather_with_grad` of several (rows, width) tensors of one dtype with the same rows, in one collective (side
    by side, gathered, cut apart again); returns the global tensors and this rank's row offset."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensors, 0
    gathered, offset = gather_with_grad(torch.cat(tensors, dim=1))
    return gathered.split([tensor.shape[1] for tensor in tensors], dim=1), offset


def check_paired_embeddings(image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> None:
    """Raise a ValueError naming the problem unless both are non-empty (batch, dim) tensors that pair up row by row."""
    if image_embeds.ndim != 2 or text_embeds.ndim != 2:
        raise ValueError(
            f"expected (batch, dim) embeddings, got image {tuple(image_embeds.shape)} and text "
            f"{tuple(text_embeds.shape)}"
        )
    if image_embeds.shape[0] == 0:
        raise ValueError("the contrastive loss needs a non-empty batch")
    if image_embeds.shape != text_embeds.shape:
        raise ValueError(
            f"image and text embeddings must pair up one to one, got {tuple(image_embeds.shape)} and "
            f"{tuple(text_embeds.shape)}"
        )


def contrastive_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    all_image_embeds: torch.Tensor,
    all_text_embeds: torch.Tensor,
    logit_scale: torch.Tensor,
    offset: int = 0,
    label_smoothing: float = 0.0,
    extra_text_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Symmetric InfoNCE (CLIP; HiMo-CLIP Eq. 2, OneLIP Eq. 1) of this process's rows against the global batch.

    Row i of the local batch is row offset + i of the global one (open_clip's local-loss labelling); the mean
    over processes of this loss is the loss of one process on the concatenated batch, and so are its gradients.
    `extra_text_logits` (local batch, M), already scaled, join each image's text denominator (per-sample hard
    negatives, OneLIP's PO-HNM); -inf marks an empty slot.

    On one process's batch alone it is transformers' CLIP loss (`transformers_compat.clip_loss`, what the models'
    `forward(return_loss=True)` returns), to float32 rounding (tested). That function does not cover what this one
    is for: it takes one square logit matrix of one batch, labels on its diagonal, and reads the image-to-text
    direction as its transpose, while a gathered batch gives each process two rectangular matrices (its images
    against every text, its texts against every image) labelled from `offset`; and its cross-entropy takes no
    `label_smoothing` (Long-CLIP's) and no `extra_text_logits`. The image-to-text logits are computed from the image
    side (not transposed): the numerics the published figures were trained with.
    """
    labels = torch.arange(image_embeds.shape[0], device=image_embeds.device) + offset
    logits_per_image = logit_scale * image_embeds @ all_text_embeds.T
    if extra_text_logits is not None:
        if label_smoothing:
            raise ValueError("label smoothing would spread mass onto the empty (-inf) hard-negative slots")
        logits_per_image = torch.cat([logits_per_image, extra_text_logits], dim=1)
    logits_per_text = logit_scale * text_embeds @ all_image_embeds.T
    return (
        F.cross_entropy(logits_per_image, labels, label_smoothing=label_smoothing)
        + F.cross_entropy(logits_per_text, labels, label_smoothing=label_smoothing)
    ) / 2


def sigmoid_loss(
    image_embeds: torch.Tensor,
    all_text_embeds: torch.Tensor,
    logit_scale: torch.Tensor,
    logit_bias: torch.Tensor,
    offset: int = 0,
) -> torch.Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023, Eq. 1; F-CAST Eq. 7-8) of this process's images against
    every text of the global batch: -mean over images of sum over texts of log sigmoid(z_ij (t x_i.y_j + b)),
    z_ij = 1 for the matching pair (global row offset + i) and -1 otherwise.

    Normalised by the number of local images as SigLIP does; summed over processes it is the loss of one process on
    the concatenated batch (texts gathered with gradient by the caller).
    """
    return pairwise_sigmoid_loss(logit_scale * image_embeds @ all_text_embeds.T + logit_bias, offset)
