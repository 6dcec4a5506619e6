"""The shared modelling code (`hf_longclip.modeling_common`), the shared losses and MoLo, each against an independent
reference written here: the paper's formula, a loop, or a plain transcription."""

import math

import pytest
import torch
import torch.nn.functional as F

from hf_longclip.modeling_common import RotaryEmbedding, apply_rotary, ntk_inverse_frequencies
from hf_longclip.models.fcast.pooling import AttentionPool
from hf_longclip.objectives import ClipLoss, contrastive_loss, sigmoid_loss
from hf_longclip.objectives.himo_clip import MoLoLoss


@pytest.mark.parametrize("target_length", [77, 248, 512])
def test_ntk_frequencies_follow_onelips_formula(target_length):
    """OneLIP Sec. 4.1: theta' = theta * ((gamma T_g / T_f) - (gamma - 1)) ** (d / (d - 2)), gamma = 8, T_f = 77."""
    d, gamma = 64, 8
    base = 10000 * ((gamma * target_length / 77) - (gamma - 1)) ** (d / (d - 2))
    expected = [base ** (-2 * i / d) for i in range(d // 2)]
    actual = ntk_inverse_frequencies(d, base_length=77, target_length=target_length, gamma=gamma)
    assert actual.tolist() == pytest.approx(expected, rel=1e-6)
    if target_length == 77:  # no stretching at the base length
        assert actual.tolist() == pytest.approx([10000 ** (-2 * i / d) for i in range(d // 2)], rel=1e-6)


def _rotate_pairs(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation written out: dimension i of the first half and i of the second half form a 2-D pair
    rotated by the angle position * inv_freq[i]."""
    half = x.shape[-1] // 2
    out = torch.empty_like(x)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            for h in range(x.shape[2]):
                for i in range(half):
                    angle = positions[b, t].item() * inv_freq[i].item()
                    c, s = math.cos(angle), math.sin(angle)
                    a1, a2 = x[b, t, h, i].item(), x[b, t, h, i + half].item()
                    out[b, t, h, i], out[b, t, h, i + half] = a1 * c - a2 * s, a1 * s + a2 * c
    return out


def test_rotary_embedding_rotates_queries_and_keys_by_position():
    torch.manual_seed(0)
    q, k = torch.randn(2, 5, 3, 8, dtype=torch.float64), torch.randn(2, 5, 3, 8, dtype=torch.float64)  # (B, L, H, d)
    inv_freq = ntk_inverse_frequencies(8, 77, 248).double()
    positions = torch.tensor([[0, 1, 2, 3, 4], [3, 5, 7, 9, 11]])
    cos, sin = RotaryEmbedding(inv_freq)(positions)
    rotated_q, rotated_k = apply_rotary(q, k, cos, sin)
    torch.testing.assert_close(rotated_q, _rotate_pairs(q, positions, inv_freq), atol=1e-5, rtol=0)
    torch.testing.assert_close(rotated_k, _rotate_pairs(k, positions, inv_freq), atol=1e-5, rtol=0)
    # relative: q_m . k_n depends on m - n only
    scores = rotated_q[0, :, 1] @ rotated_k[0, :, 1].T
    shifted_q, shifted_k = apply_rotary(q, k, *RotaryEmbedding(inv_freq)(positions + 7))
    torch.testing.assert_close(shifted_q[0, :, 1] @ shifted_k[0, :, 1].T, scores, atol=1e-5, rtol=0)


def test_sigmoid_loss_matches_siglips_pairwise_sum():
    torch.manual_seed(0)
    image, text = F.normalize(torch.randn(4, 8), dim=-1), F.normalize(torch.randn(4, 8), dim=-1)
    t, b = torch.tensor(10.0), torch.tensor(-10.0)
    expected = 0.0
    for i in range(4):
        for j in range(4):
            z = 1.0 if i == j else -1.0
            expected -= math.log(1 / (1 + math.exp(-z * (t.item() * (image[i] @ text[j]).item() + b.item()))))
    expected /= 4
    assert sigmoid_loss(image, text, t, b).item() == pytest.approx(expected, rel=1e-5)
    # the local rows of a larger gathered batch: row i matches global row offset + i
    assert sigmoid_loss(image[2:], text, t, b, offset=2).item() * 2 == pytest.approx(
        sum(-F.logsigmoid((1 if i == j else -1) * (t * image[i] @ text[j] + b)).item()
            for i in (2, 3) for j in range(4)), rel=1e-5)


def test_objectives_return_named_terms_that_sum_to_the_loss():
    torch.manual_seed(0)
    image, text = F.normalize(torch.randn(6, 8), dim=-1), F.normalize(torch.randn(6, 8), dim=-1)
    scale = torch.tensor(10.0)
    clip = ClipLoss()(image, text, scale)
    assert set(clip) == {"contrastive_loss"}
    assert clip["contrastive_loss"] == contrastive_loss(image, text, image, text, scale)
    molo = MoLoLoss(tau=0.9, weight=2.0)(image, text, scale)
    assert set(molo) == {"global_loss", "component_loss"}
    assert molo["global_loss"] == clip["contrastive_loss"]
    assert molo["component_loss"] == 2.0 * MoLoLoss(tau=0.9, weight=1.0)(image, text, scale)["component_loss"]
    assert set(MoLoLoss(weight=0.0)(image, text, scale)) == {"global_loss"}
    with pytest.raises(ValueError, match="scope"):
        MoLoLoss(scope="everywhere")


def test_attention_pool_ignores_padding_and_matches_a_direct_computation():
    torch.manual_seed(0)
    pool = AttentionPool(dim=8, num_heads=2, kv_dim=6).eval()
    queries, tokens = torch.randn(2, 3, 8), torch.randn(2, 5, 6)
    padding = torch.tensor([[False, False, False, True, True], [False] * 5])
    pooled, attention = pool(queries, tokens, padding)
    assert attention.shape == (2, 3, 5)
    assert torch.all(attention[0, :, 3:] == 0)
    torch.testing.assert_close(attention.sum(-1), torch.ones(2, 3))
    # padded tokens can take any value without changing the result
    changed = tokens.clone()
    changed[0, 3:] = 1e3
    torch.testing.assert_close(pool(queries, changed, padding)[0], pooled)
    # one row by hand: per-head softmax(q k^T / sqrt(d)) v, then the output projection
    attn = pool.attention
    q = F.linear(pool.query_norm(queries[1]), attn.q_proj_weight, attn.in_proj_bias[:8])
    normed = pool.token_norm(tokens[1])
    k = F.linear(normed, attn.k_proj_weight, attn.in_proj_bias[8:16])
    v = F.linear(normed, attn.v_proj_weight, attn.in_proj_bias[16:])
    heads = []
    for h in range(2):
        sl = slice(4 * h, 4 * h + 4)
        weights = torch.softmax(q[:, sl] @ k[:, sl].T / 2.0, dim=-1)
        heads.append(weights @ v[:, sl])
    expected = attn.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(pooled[1], expected, atol=1e-5, rtol=1e-5)
