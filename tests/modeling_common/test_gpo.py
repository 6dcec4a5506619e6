"""GPO (VSE-infinity's Generalized Pooling Operator): against a direct per-sample loop, padding invariance, the
uniform-weight case, gradients."""

import math

import pytest
import torch

from hf_longclip.export import bundle_sources
from hf_longclip.modeling_common import gpo as gpo_module
from hf_longclip.modeling_common.gpo import GPO
from hf_longclip.modeling_common.positions import sinusoidal_encoding


def make_gpo(seed: int = 0, **kwargs) -> GPO:
    torch.manual_seed(seed)
    return GPO(**kwargs)


def loop_gpo(gpo: GPO, features: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One sample at a time, no padding anywhere: encodings written out, the GRU over exactly n steps, each
    dimension sorted with Python's `sorted`."""
    pooled, all_weights = [], []
    for sample, n in zip(features, lengths):
        encoding = torch.tensor([[math.sin(k / 10000 ** (2 * (c // 2) / gpo.d_pe)) if c % 2 == 0
                                  else math.cos(k / 10000 ** (2 * (c // 2) / gpo.d_pe)) for c in range(gpo.d_pe)]
                                 for k in range(n)])
        hidden, _ = gpo.gru(encoding[None])
        hidden = (hidden[0, :, : gpo.d_hidden] + hidden[0, :, gpo.d_hidden :]) / 2
        weights = torch.softmax(gpo.linear(hidden)[:, 0] / 0.1, dim=0)
        row = []
        for d in range(sample.shape[1]):
            ranked = sorted(sample[:n, d].tolist(), reverse=True)
            row.append(sum(w * x for w, x in zip(weights.tolist(), ranked)))
        pooled.append(torch.tensor(row))
        all_weights.append(torch.cat([weights, torch.zeros(sample.shape[0] - n)]))
    return torch.stack(pooled), torch.stack(all_weights)


def test_sinusoidal_encoding_interleaves_sin_and_cos():
    encoding = sinusoidal_encoding(5, 6)
    assert encoding.shape == (5, 6)
    torch.testing.assert_close(encoding[3, 2], torch.tensor(math.sin(3 / 10000 ** (2 / 6))))
    torch.testing.assert_close(encoding[3, 3], torch.tensor(math.cos(3 / 10000 ** (2 / 6))))
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(5, 7)


def test_matches_a_direct_loop_with_mixed_lengths():
    gpo = make_gpo(d_pe=8, d_hidden=6)
    features = torch.randn(4, 7, 5, generator=torch.Generator().manual_seed(1))
    lengths = [7, 3, 5, 3]
    with torch.no_grad():
        pooled, weights = gpo(features, torch.tensor(lengths))
        expected_pooled, expected_weights = loop_gpo(gpo, features, lengths)
    assert pooled.shape == (4, 5) and weights.shape == (4, 7)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(pooled, expected_pooled, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(1), torch.ones(4))


def test_padded_tokens_never_change_the_output():
    gpo = make_gpo()
    features = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([9, 4, 6])
    pooled, weights = gpo(features, lengths)
    poisoned = features.clone()
    for b, n in enumerate(lengths.tolist()):
        poison = torch.tensor([1e6, -1e6, float("inf"), float("nan")]).repeat(9 * 4)
        poisoned[b, n:] = poison[: (9 - n) * 16].view(-1, 16)
    poisoned_pooled, poisoned_weights = gpo(poisoned, lengths)
    assert torch.equal(poisoned_pooled, pooled) and torch.equal(poisoned_weights, weights)
    assert (weights[1, 4:] == 0).all() and (weights[2, 6:] == 0).all()
    # ... and each sample equals itself alone, unpadded (the backward GRU starts at its own last token).
    for b, n in enumerate(lengths.tolist()):
        alone, alone_weights = gpo(features[b : b + 1, :n])
        torch.testing.assert_close(alone[0], pooled[b], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(alone_weights[0], weights[b, :n], atol=1e-6, rtol=1e-5)
    # no gradient reaches the padding
    features.requires_grad_()
    gpo(features, lengths)[0].sum().backward()
    assert (features.grad[1, 4:] == 0).all() and (features.grad[1, :4] != 0).any()


def test_equal_weights_reduce_to_the_mean_over_valid_tokens():
    gpo = make_gpo()
    with torch.no_grad():
        gpo.linear.weight.zero_()  # every index scores 0: uniform weights 1 / n
    features = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([6, 2])
    pooled, weights = gpo(features, lengths)
    torch.testing.assert_close(weights[1], torch.tensor([0.5, 0.5, 0, 0, 0, 0]))
    torch.testing.assert_close(pooled[0], features[0].mean(0))
    torch.testing.assert_close(pooled[1], features[1, :2].mean(0))


def test_gradient_reaches_the_features_the_gru_and_the_scorer():
    gpo = make_gpo()
    features = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(4), requires_grad=True)
    pooled, _ = gpo(features, torch.tensor([5, 2, 4]))
    (pooled * torch.randn(3, 8, generator=torch.Generator().manual_seed(5))).sum().backward()
    assert features.grad.abs().sum() > 0
    for name, param in gpo.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, name


def test_parameter_names_follow_the_official_checkpoints():
    assert sorted(GPO().state_dict()) == sorted(
        ["linear.weight"] + [f"gru.{kind}_{part}_l0{suffix}" for kind in ("weight", "bias")
                             for part in ("ih", "hh") for suffix in ("", "_reverse")])


def test_invalid_lengths_are_clear_errors():
    gpo = make_gpo()
    features = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match=r"\[1, 4\]"):
        gpo(features, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"\[1, 4\]"):
        gpo(features, torch.tensor([5, 4]))
    with pytest.raises(ValueError, match="one per sample"):
        gpo(features, torch.tensor([4]))
    with pytest.raises(ValueError, match="batch, tokens, dim"):
        gpo(features[0], torch.tensor([4]))


def test_bundle_carries_only_the_position_encodings():
    assert set(bundle_sources(gpo_module.__file__)) == {"gpo.py", "positions.py"}
