"""HiDe (HiMo-CLIP Eq. 1): in-batch PCA of text embeddings, its component count and its stable gradient."""

import pytest
import torch

from helpers.builders import molo_loss
from hf_longclip.objectives.himo_clip import _LowRankReconstruction, hide_components, num_principal_components

MEAN = torch.tensor([1.0, 1.0, 1.0])
# Centred rows with orthogonal columns: variance 36 along e1, 0.04 along e2, none along e3.
CENTRED = torch.tensor([[3.0, 0.1, 0.0], [-3.0, -0.1, 0.0], [3.0, -0.1, 0.0], [-3.0, 0.1, 0.0]])


def test_hand_computed_projection_keeps_dominant_direction_and_adds_mean_back():
    components = hide_components(CENTRED + MEAN, tau=0.9)  # 36 / 36.04 = 0.9989 >= 0.9 -> m = 1
    expected = torch.tensor([[4.0, 1.0, 1.0], [-2.0, 1.0, 1.0], [4.0, 1.0, 1.0], [-2.0, 1.0, 1.0]])
    torch.testing.assert_close(components, expected, atol=1e-5, rtol=0)


def test_threshold_above_first_ratio_keeps_both_directions():
    components = hide_components(CENTRED + MEAN, tau=0.9995)  # needs m = 2: the input comes back
    torch.testing.assert_close(components, CENTRED + MEAN, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("tau", "expected"), [(0.5, 1), (0.51, 2), (0.8, 2), (0.81, 3), (1.0, 3)]
)
def test_smallest_m_reaching_tau(tau, expected):
    singular_values = torch.tensor([5.0, 3.0, 2.0]).sqrt()  # explained variance 0.5, 0.3, 0.2
    assert num_principal_components(singular_values, tau) == expected


def test_tie_at_the_threshold_is_not_split():
    singular_values = torch.ones(10)  # each explains 0.1: tau = 0.9 would cut a tie after 9
    assert num_principal_components(singular_values, 0.9) == 10
    assert num_principal_components(torch.zeros(4), 0.9) == 0


def _reference_components(embeds: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 1 through torch.linalg.svd's own autograd (fine when singular values are distinct)."""
    mean = embeds.mean(0, keepdim=True)
    u, s, vh = torch.linalg.svd(embeds - mean, full_matrices=False)
    m = num_principal_components(s.detach(), tau)
    return (u[:, :m] * s[:m]) @ vh[:m] + mean


@pytest.mark.parametrize("shape", [(6, 10), (12, 5), (8, 8)])
def test_gradient_matches_svd_autograd_for_distinct_singular_values(shape):
    torch.manual_seed(0)
    embeds = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(*shape, dtype=torch.float64)
    (expected,) = torch.autograd.grad((_reference_components(embeds, 0.7) * weights).sum(), embeds)
    # The backward formula itself, in float64: exact up to rounding (measured: 4e-15).
    mean = embeds.mean(0, keepdim=True)
    (exact,) = torch.autograd.grad(((_LowRankReconstruction.apply(embeds - mean, 0.7) + mean) * weights).sum(),
                                   embeds)
    torch.testing.assert_close(exact, expected, atol=1e-10, rtol=0)
    # hide_components runs in float32; the gap division amplifies its rounding (measured: 4e-6 of the largest
    # entry on the 8x8 case), so the tolerance scales with the gradient's size.
    (actual,) = torch.autograd.grad((hide_components(embeds, 0.7).double() * weights).sum(), embeds)
    torch.testing.assert_close(actual, expected, atol=3e-5 * expected.abs().max().item(), rtol=0)


def test_gradcheck_in_double():
    torch.manual_seed(1)
    centred = torch.randn(5, 7, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: _LowRankReconstruction.apply(x, 0.8), (centred.requires_grad_(),))


def _degenerate_batches() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    base = torch.nn.functional.normalize(torch.randn(4, 16), dim=-1)
    return {
        "single": base[:1],
        "identical": base[:1].repeat(6, 1),
        "duplicated": torch.cat([base, base]),
        "rank_deficient": torch.nn.functional.normalize(torch.randn(8, 2) @ torch.randn(2, 16), dim=-1),
        "equal_spectrum": torch.eye(10, 16),  # ten equal singular values: tau=0.9 lands inside the tie
    }


@pytest.mark.parametrize("name", list(_degenerate_batches()))
def test_degenerate_batches_give_finite_loss_and_gradients(name):
    text = _degenerate_batches()[name].clone().requires_grad_()
    image = torch.nn.functional.normalize(torch.randn(text.shape), dim=-1).requires_grad_()
    loss = molo_loss(image, text, torch.tensor(10.0), tau=0.9, weight=1.0)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(text.grad).all() and torch.isfinite(image.grad).all()


@pytest.mark.parametrize("name", ["single", "identical", "equal_spectrum"])
def test_svd_autograd_itself_fails_on_such_a_batch(name):
    """The reason for the custom backward: SVD's own gradient is NaN on repeated singular values."""
    text = _degenerate_batches()[name].double().requires_grad_()
    weights = torch.randn(text.shape, dtype=torch.float64)
    (reference,) = torch.autograd.grad((_reference_components(text, 0.9) * weights).sum(), text)
    (ours,) = torch.autograd.grad((hide_components(text, 0.9).double() * weights).sum(), text)
    assert not torch.isfinite(reference).all()
    assert torch.isfinite(ours).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_runs_in_float32_under_autocast(dtype):
    torch.manual_seed(0)
    text = torch.nn.functional.normalize(torch.randn(16, 32), dim=-1)
    image = torch.nn.functional.normalize(torch.randn(16, 32), dim=-1)
    reference = molo_loss(image, text, torch.tensor(20.0))
    with torch.autocast("cpu", dtype=dtype):
        components = hide_components(text.to(dtype), 0.9)
        loss = molo_loss(image.to(dtype), text.to(dtype), torch.tensor(20.0))
    assert components.dtype == torch.float32 and loss.dtype == torch.float32
    torch.testing.assert_close(loss, reference, atol=0.05, rtol=0.01)  # only the inputs' rounding differs
