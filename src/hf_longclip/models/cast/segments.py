"""Segment tokens (CAST, Ke et al. 2022; F-CAST Sec. 3.1): pooling grid features into superpixel tokens, farthest
point sampling of graph-pooling seeds, the soft assignment of tokens to seeds, and the fine-to-coarse label maps
those assignments compose. Pure torch (no dgl), without host synchronisation, so every piece runs inside a
training step on any device."""

import torch
import torch.nn.functional as F

from hf_longclip.modeling_common.positions import sinusoidal_encoding


def sincos_2d_positions(height: int, width: int, dim: int, device=None, layout: str = "interleaved") -> torch.Tensor:
    """(height * width, dim) fixed 2-D sin-cos position features of a grid in row-major order (MoCo v3 / CAST):
    the first half encodes the row, the second the column, each with `sinusoidal_encoding` of dim / 2
    ("interleaved": sin and cos of each frequency side by side), or ("blocks", released CAST's channel order) the
    sines of all frequencies, then their cosines."""
    if dim % 4:
        raise ValueError(f"2-D sin-cos positions need a dimension divisible by 4, got {dim}")
    rows = sinusoidal_encoding(height, dim // 2, device=device)
    cols = sinusoidal_encoding(width, dim // 2, device=device)
    if layout == "blocks":  # (sin, cos) pairs -> all sines, then all cosines
        rows, cols = (table.unflatten(1, (-1, 2)).transpose(1, 2).flatten(1) for table in (rows, cols))
    return torch.cat([rows[:, None].expand(-1, width, -1), cols[None].expand(height, -1, -1)], dim=-1).flatten(0, 1)


def segment_pooling_weights(
    labels: torch.Tensor, num_segments: int, grid: tuple[int, int], stride: int, per_cell: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights that average grid features over each segment's pixels, and which segments exist.

    `labels` (B, H, W) holds segment ids in [0, num_segments); pixel (y, x) lies in grid cell (y // stride,
    x // stride) of a (h, w) = `grid` feature map. Returns `weights` (B, num_segments, h * w), row s holding the
    share of segment s's pixels in each cell (so `weights @ features` is the mean, over the segment's pixels, of
    the features nearest-upsampled to pixels), and `valid` (B, num_segments), False for ids without pixels (padding;
    their weight rows are zero). Every pixel counts: a segment smaller than a cell still gets a token.

    `per_cell=True` is released CAST's rule instead: the label map nearest-downsampled to the grid (each cell takes
    the label of the pixel `F.interpolate(mode="nearest")` picks), the mean over a segment's cells; a segment that
    keeps no cell is padding.
    """
    if per_cell:
        labels = F.interpolate(labels[:, None].float(), size=grid, mode="nearest")[:, 0].long()
        stride = 1
    batch, height, width = labels.shape
    grid_h, grid_w = grid
    rows = torch.arange(height, device=labels.device) // stride
    cols = torch.arange(width, device=labels.device) // stride
    cells = (rows[:, None] * grid_w + cols[None, :]).expand(batch, -1, -1)
    index = (labels.long() * (grid_h * grid_w) + cells).flatten(1)
    counts = torch.zeros(batch, num_segments * grid_h * grid_w, device=labels.device)
    counts.scatter_add_(1, index, torch.ones_like(index, dtype=counts.dtype))
    counts = counts.view(batch, num_segments, grid_h * grid_w)
    sizes = counts.sum(-1, keepdim=True)
    return counts / sizes.clamp_min(1), sizes.squeeze(-1) > 0


def farthest_point_sampling(points: torch.Tensor, num_samples: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """(B, num_samples) indices of points chosen by farthest point sampling in Euclidean distance.

    As CAST's graph pooling, the search starts from the mean of the valid points (which is not itself chosen): the
    first sample is the valid point farthest from it, each next one the valid point farthest from all chosen so
    far (ties to the lowest index). Invalid (padding) points are never chosen while a valid one remains; with fewer
    valid points than `num_samples`, the surplus picks repeat valid points (the caller masks them as padding).
    """
    points = points.float()
    batch, count, _ = points.shape
    valid = torch.ones(batch, count, dtype=torch.bool, device=points.device) if valid is None else valid
    weights = valid.to(points.dtype)[..., None]
    mean = (points * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp_min(1)
    floor = torch.full((), -1.0, device=points.device)  # below any distance: padding is never the farthest
    distance = torch.where(valid, (points - mean).square().sum(-1), floor)
    chosen = []
    for _ in range(num_samples):
        index = distance.argmax(dim=1)
        chosen.append(index)
        picked = points.gather(1, index[:, None, None].expand(-1, 1, points.shape[-1]))
        distance = torch.minimum(distance, torch.where(valid, (points - picked).square().sum(-1), floor))
    return torch.stack(chosen, dim=1)


def cosine_soft_assignment(
    nodes: torch.Tensor, centroids: torch.Tensor, scale: float, node_valid: torch.Tensor,
    centroid_valid: torch.Tensor,
) -> torch.Tensor:
    """(B, N, K) soft assignment softmax_k(scale * cos(node_n, centroid_k)) of CAST's graph pooling (scale 5).

    Rows of padding nodes are zero (they hand no mass to any coarse segment); padding centroids receive none."""
    logits = scale * F.normalize(nodes, dim=-1) @ F.normalize(centroids, dim=-1).transpose(1, 2)
    logits = logits.masked_fill(~centroid_valid[:, None, :], torch.finfo(logits.dtype).min)
    return logits.softmax(dim=-1) * node_valid[..., None].to(logits.dtype)


def hierarchy_label_maps(labels: torch.Tensor, assignments: list[torch.Tensor] | tuple[torch.Tensor, ...]
                         ) -> list[torch.Tensor]:
    """Pixel label maps of every level, finest first: `labels` (B, H, W) themselves, then, for each (B, N, K)
    assignment matrix of the graph poolings, each pixel's coarse segment when every segment goes wholly to the
    coarse segment it gives the most mass (hard assignment composed level by level)."""
    maps, current = [labels.long()], labels.long()
    for assignment in assignments:
        hard = assignment.argmax(dim=-1)  # (B, N): each fine segment's coarse segment
        current = hard.gather(1, current.flatten(1)).view_as(current)
        maps.append(current)
    return maps


__all__ = [
    "cosine_soft_assignment",
    "farthest_point_sampling",
    "hierarchy_label_maps",
    "segment_pooling_weights",
    "sincos_2d_positions",
]
