"""Position encodings shared by the models: the Transformer's fixed sin/cos encoding (GPO's index encoding, CAST's
2-D positions), Long-CLIP's stretching of a learned table (HiMo-CLIP) and rotary embeddings with NTK-scaled
frequencies (OneLIP Eq. 2, Sec. 4.1)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

LONGCLIP_KEEP_POSITIONS = 20
LONGCLIP_STRETCH_FACTOR = 4


def sinusoidal_encoding(length: int, dim: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """(length, dim) sin/cos encoding of the indices 0..length-1 (the Transformer's, as VSE-infinity): column 2i is
    sin(k / 10000^(2i/dim)), column 2i+1 the cosine of the same angle."""
    if dim % 2:
        raise ValueError(f"the sin/cos encoding needs an even dimension, got {dim}")
    positions = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    frequencies = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    angles = positions * frequencies
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1).to(dtype)


def stretch_position_embeddings(
    weight: torch.Tensor, keep: int = LONGCLIP_KEEP_POSITIONS, factor: int = LONGCLIP_STRETCH_FACTOR
) -> torch.Tensor:
    """Long-CLIP's knowledge-preserved stretching of a (L, D) position table to (factor * L - (factor - 1) * keep, D).

    Rows [0, keep) are kept; each later row i is followed by factor - 1 rows linearly interpolated towards row
    i + 1; the last row is extrapolated factor - 1 times along its difference to the row before. For CLIP,
    77 positions become 4 * 77 - 3 * 20 = 248.
    """
    length, dim = weight.shape
    if not 0 <= keep <= length - 2 or factor < 1:
        raise ValueError(f"cannot stretch {length} positions keeping {keep} with factor {factor}")
    frac = torch.arange(factor, dtype=weight.dtype, device=weight.device) / factor
    tail = weight[keep:]
    interpolated = tail[:-1, None] * (1 - frac)[None, :, None] + tail[1:, None] * frac[None, :, None]
    extrapolated = weight[-1] + frac[:, None] * (weight[-1] - weight[-2])
    return torch.cat([weight[:keep], interpolated.reshape(-1, dim), extrapolated])


class KeptRowsEmbedding(nn.Embedding):
    """An embedding table whose first `kept_rows` rows receive no gradient: Long-CLIP's fine-tuning, which keeps
    the position rows [0, 20) that stretching preserved (its `positional_embedding`, `requires_grad=False`) and
    trains the others (its `positional_embedding_res`). The rows are detached in the forward pass, so any
    optimizer sees a zero gradient there; a decoupled weight decay still shrinks them unless the training loop
    restores them (HiMo-CLIP's task does after each optimizer step)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, kept_rows: int = 0, **kwargs):
        if not 0 <= kept_rows < num_embeddings:
            raise ValueError(f"kept_rows must be in [0, {num_embeddings}), got {kept_rows}")
        super().__init__(num_embeddings, embedding_dim, **kwargs)
        self.kept_rows = kept_rows

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if self.kept_rows and weight.requires_grad and torch.is_grad_enabled():
            weight = torch.cat([weight[:self.kept_rows].detach(), weight[self.kept_rows:]])
        return F.embedding(ids, weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                           self.sparse)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kept_rows={self.kept_rows}"


def ntk_inverse_frequencies(
    head_dim: int, base_length: int, target_length: int, gamma: float = 8.0, theta: float = 10000.0
) -> torch.Tensor:
    """RoPE inverse frequencies with OneLIP's NTK scaling (Sec. 4.1): the base theta is multiplied by
    ((gamma * T_g / T_f) - (gamma - 1)) ** (d / (d - 2)), T_f = `base_length`, T_g = `target_length` (no scaling
    where T_g <= T_f). This is transformers' dynamic-NTK initialisation evaluated at T_g, computed as it computes it
    (the same float32 values)."""
    if head_dim < 4 or head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head dimension >= 4, got {head_dim}")
    target_length = max(target_length, base_length)
    base = theta * ((gamma * target_length / base_length) - (gamma - 1)) ** (head_dim / (head_dim - 2))
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(dtype=torch.float) / head_dim))


class RotaryEmbedding(nn.Module):
    """cos/sin tables of rotary position embeddings for given position ids; `transformer.apply_rotary` rotates q and
    k with them (half-split convention)."""

    def __init__(self, inv_freq: torch.Tensor):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos(), angles.sin()
