"""Bounds for comparing floating-point results of two computation paths (another padding, chunking, batching or
optimizer implementation) that follow from the computation rather than a bare constant: each rounded operation along
the way can move a result by at most the dtype's epsilon times its magnitude."""

import torch


def rounding_atol(reference: torch.Tensor, roundings: int) -> float:
    """An absolute tolerance of `roundings` roundings at `reference`'s magnitude: `roundings` x the machine epsilon of
    `reference`'s dtype x its largest absolute value."""
    return roundings * torch.finfo(reference.dtype).eps * reference.detach().abs().max().item()


def transformer_roundings(num_layers: int) -> int:
    """Roundings a transformer's output may differ by when two paths reduce in different orders (other key counts or
    blockings): one per reduction, 12 a layer (2 LayerNorms of 2 each; the attention's 5: Q/K/V, scores, softmax,
    values, output; the MLP's 2 matmuls; the residual adds), and 4 for the final norm, pooling and projection."""
    return 12 * num_layers + 4
