"""F-CAST's attention pooling (FLAIR's AttnPool): learned or text-given queries attending over a set of tokens."""

import torch
from torch import nn


class AttentionPool(nn.Module):
    """Multi-head attention pooling with layer norms on the queries and on the keys/values (FLAIR's AttnPool;
    F-CAST Eq. 6). Padding tokens (`padding_mask` True) receive no attention.

    `forward(queries (B, Q, D), tokens (B, N, D_kv))` returns the pooled (B, Q, D) and the attention (B, Q, N),
    averaged over heads.
    """

    def __init__(self, dim: int, num_heads: int, kv_dim: int | None = None):
        super().__init__()
        kv_dim = kv_dim or dim
        self.query_norm = nn.LayerNorm(dim)
        self.token_norm = nn.LayerNorm(kv_dim)
        self.attention = nn.MultiheadAttention(dim, num_heads, kdim=kv_dim, vdim=kv_dim, batch_first=True)

    def forward(
        self, queries: torch.Tensor, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.token_norm(tokens)
        pooled, attention = self.attention(
            self.query_norm(queries), tokens, tokens, key_padding_mask=padding_mask, need_weights=True
        )
        return pooled, attention
