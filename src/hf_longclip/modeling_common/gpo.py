"""Generalized Pooling Operator (GPO; VSE-infinity, Chen et al., "Learning the Best Pooling Strategy for Visual
Semantic Embedding", CVPR 2021), the image pooling that DITM puts atop its ViT (DITM Sec. IV-C-1): a learned
weighted sum of each dimension's sorted values."""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from hf_longclip.modeling_common.positions import sinusoidal_encoding


class GPO(nn.Module):
    """GPO: pooled_d = sum_k theta_k * max_k(features[:, d]), max_k being the k-th largest value of dimension d over
    the valid tokens, and the weights theta = softmax_k(w^T GRU(PE(k)) / temperature) over k = 1..n.

    Index k is encoded with a sin/cos encoding of size `d_pe`, a bidirectional GRU of hidden size `d_hidden` runs
    over the n = length encodings of each sample (packed: its backward direction starts at the sample's own last
    token), the two directions are averaged, a bias-free linear layer scores each index and a softmax with
    `temperature` (0.1 in the official code) turns the scores into weights. The weights depend on the length
    alone, so they are computed once per distinct length in the batch. Parameter names (`gru`, `linear`) match the
    official checkpoints.

    `forward(features (B, K, D), lengths (B,) or None)` returns pooled (B, D) and weights (B, K); tokens at index
    >= lengths[b] are padding: they get weight 0 and never change the output. `lengths=None` means all K valid.
    """

    def __init__(self, d_pe: int = 32, d_hidden: int = 32, temperature: float = 0.1):
        super().__init__()
        if d_pe % 2:
            raise ValueError(f"d_pe must be even for the sin/cos encoding, got {d_pe}")
        self.d_pe, self.d_hidden, self.temperature = d_pe, d_hidden, temperature
        self.gru = nn.GRU(d_pe, d_hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(d_hidden, 1, bias=False)

    def pool_weights(self, lengths: torch.Tensor, max_length: int) -> torch.Tensor:
        """(len(lengths), max_length) weights over the sorted indices for each given length (a CPU int tensor)."""
        device, dtype = self.linear.weight.device, self.linear.weight.dtype
        encodings = sinusoidal_encoding(max_length, self.d_pe, device, dtype).expand(len(lengths), -1, -1)
        packed = pack_padded_sequence(encodings, lengths, batch_first=True, enforce_sorted=False)
        if device.type == "cuda":
            self.gru.flatten_parameters()
        hidden, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True, total_length=max_length)
        valid = torch.arange(max_length, device=device) < lengths.to(device)[:, None]
        return self._softmax_scores(hidden, valid)

    def full_length_weights(self, length: int) -> torch.Tensor:
        """(length,) weights when every token is valid: the GRU runs unpacked (the same result as a packed sequence
        of full length), with no data-dependent shape, so torch.compile and torch.export trace it."""
        device, dtype = self.linear.weight.device, self.linear.weight.dtype
        hidden, _ = self.gru(sinusoidal_encoding(length, self.d_pe, device, dtype)[None])
        return self._softmax_scores(hidden, None)[0]

    def _softmax_scores(self, hidden: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        hidden = (hidden[..., : self.d_hidden] + hidden[..., self.d_hidden :]) / 2  # mean of the two directions
        scores = self.linear(hidden).squeeze(-1)
        if valid is not None:
            scores = scores.masked_fill(~valid, float("-inf"))
        return torch.softmax(scores / self.temperature, dim=1)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if features.ndim != 3 or features.shape[1] == 0:
            raise ValueError(f"expected (batch, tokens, dim) features with at least one token, "
                             f"got {tuple(features.shape)}")
        batch, tokens, _ = features.shape
        if lengths is None:
            weights = self.full_length_weights(tokens).to(features.dtype)
            ranked = features.sort(dim=1, descending=True).values
            return (ranked * weights[:, None]).sum(dim=1), weights.expand(batch, -1)
        lengths_cpu = torch.as_tensor(lengths).detach().to("cpu")
        if lengths_cpu.shape != (batch,) or lengths_cpu.is_floating_point() or lengths_cpu.is_complex():
            raise ValueError(f"lengths must be {batch} integers, one per sample, got {lengths_cpu}")
        if int(lengths_cpu.min()) < 1 or int(lengths_cpu.max()) > tokens:
            raise ValueError(f"every length must lie in [1, {tokens}] (the token count), got {lengths_cpu.tolist()}")
        lengths_cpu = lengths_cpu.long()
        max_length = int(lengths_cpu.max())
        distinct, inverse = torch.unique(lengths_cpu, return_inverse=True)
        weights = self.pool_weights(distinct, max_length)[inverse.to(features.device)]  # (B, max_length)

        valid = (torch.arange(max_length, device=features.device) < lengths_cpu.to(features.device)[:, None])[..., None]
        features = features[:, :max_length]
        # Padding sorts last, then is zeroed: the first lengths[b] sorted rows are exactly the valid values.
        ranked = features.masked_fill(~valid, float("-inf")).sort(dim=1, descending=True).values
        ranked = ranked.masked_fill(~valid, 0.0)
        pooled = (ranked * weights[..., None].to(ranked.dtype)).sum(dim=1)
        if max_length < tokens:
            weights = nn.functional.pad(weights, (0, tokens - max_length))
        return pooled, weights
