"""F-CAST's attention pooling (FLAIR's AttnPool): learned or text-given queries attending over a set of tokens."""

import torch
from torch import nn


class AttentionPool(nn.Module):
    """Multi-head attention pooling with layer norms on the queries and on the keys/values (FLAIR's AttnPool;
    F-CAST Eq. 6). Padding tokens (`padding_mask` True) receive no attention.

    FLAIR's released block (`PureAttentionPoolingBlock`) differs in two details, switched on here by `value_norm`
    (the values get a LayerNorm of their own instead of sharing the keys') and `zero_attention` (a zero key and
    value appended, `nn.MultiheadAttention(add_zero_attn=True)`: a query may attend to nothing, so the attention
    over the tokens sums to at most one).

    `forward(queries (B, Q, D), tokens (B, N, D_kv))` returns the pooled (B, Q, D) and the attention (B, Q, N),
    averaged over heads.
    """

    def __init__(self, dim: int, num_heads: int, kv_dim: int | None = None, value_norm: bool = False,
                 zero_attention: bool = False):
        super().__init__()
        kv_dim = kv_dim or dim
        self.query_norm = nn.LayerNorm(dim)
        self.token_norm = nn.LayerNorm(kv_dim)
        self.value_norm = nn.LayerNorm(kv_dim) if value_norm else None
        self.attention = nn.MultiheadAttention(dim, num_heads, kdim=kv_dim, vdim=kv_dim, batch_first=True,
                                               add_zero_attn=zero_attention)

    def forward(
        self, queries: torch.Tensor, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys = self.token_norm(tokens)
        values = keys if self.value_norm is None else self.value_norm(tokens)
        pooled, attention = self.attention(
            self.query_norm(queries), keys, values, key_padding_mask=padding_mask, need_weights=True
        )
        return pooled, attention[..., : tokens.shape[1]]  # without the zero key's share, if any
