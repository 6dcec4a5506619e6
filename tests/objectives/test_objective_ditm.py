"""DITM's objective (Eq. 4-7): adaptive triplet loss against a transcription of VSE++ and a direct loop, the
ordering loss against Eq. 6, positives never negatives, errors, and the global batch over processes."""

import gc
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from helpers.launch import torchrun
from hf_longclip.objectives import ditm
from hf_longclip.objectives.ditm import DITMLoss, adaptive_triplet_loss

WORLD_SIZE = 2


def vsepp_contrastive_loss(im: torch.Tensor, s: torch.Tensor, margin: float, max_violation: bool) -> torch.Tensor:
    """VSE++'s ContrastiveLoss (Faghri et al. 2017), transcribed: cost_s is image i against caption j, cost_im
    caption j against image i, both against the diagonal (positive) scores."""
    scores = im @ s.T
    diagonal = scores.diag().view(-1, 1)
    d1 = diagonal.expand_as(scores)
    d2 = diagonal.t().expand_as(scores)
    cost_s = (margin + scores - d1).clamp(min=0)
    cost_im = (margin + scores - d2).clamp(min=0)
    identity = torch.eye(scores.shape[0], dtype=torch.bool)
    cost_s = cost_s.masked_fill(identity, 0)
    cost_im = cost_im.masked_fill(identity, 0)
    if max_violation:
        cost_s = cost_s.max(1)[0]
        cost_im = cost_im.max(0)[0]
    return cost_s.sum() + cost_im.sum()


def embeddings(batch: int, dim: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(batch, dim, generator=generator), dim=-1)
    text = F.normalize(image + 0.8 * torch.randn(batch, dim, generator=generator), dim=-1)
    return image, text


def grouped_batch(images: int = 5, captions: int = 3, dim: int = 16, seed: int = 0):
    """`captions` rows per image (the image embedding repeated), random descriptiveness in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(images, dim, generator=generator), dim=-1).repeat_interleave(captions, 0)
    text = F.normalize(image + 0.7 * torch.randn(images * captions, dim, generator=generator), dim=-1)
    ids = torch.arange(images).repeat_interleave(captions)
    delta = torch.rand(images * captions, generator=generator)
    return image, text, ids, delta


def loop_triplet_loss(image, text, ids, delta, tau, hardest):
    """Eq. 4-5 row by row: negatives are the rows of other images; t^- and v^- the most similar of them."""
    total = torch.zeros(())
    for i in range(len(ids)):
        negatives = [j for j in range(len(ids)) if ids[j] != ids[i]]
        positive = image[i] @ text[i]
        text_terms = [((delta[i] + delta[j]) / tau - positive + image[i] @ text[j]).clamp(min=0) for j in negatives]
        image_terms = [(2 * delta[i] / tau - positive + image[j] @ text[i]).clamp(min=0) for j in negatives]
        if not negatives:
            continue
        if hardest:
            t_minus = max(negatives, key=lambda j: float(image[i] @ text[j]))
            v_minus = max(negatives, key=lambda j: float(image[j] @ text[i]))
            total = total + text_terms[negatives.index(t_minus)] + image_terms[negatives.index(v_minus)]
        else:
            total = total + sum(text_terms) + sum(image_terms)
    return total


def loop_ordering_loss(image, text, ids, delta, floor=1e-2):
    """Eq. 6 over unordered pairs {t, t^+} of captions of one image (rows share the image embedding)."""
    total = torch.zeros(())
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            if ids[i] == ids[j]:
                distance = torch.linalg.vector_norm(image[i] - text[i])
                ratio_distance = distance / torch.linalg.vector_norm(image[i] - text[j])
                ratio_delta = delta[j].clamp(min=floor) / delta[i].clamp(min=floor)
                total = total + (torch.log(ratio_distance) - torch.log(ratio_delta)) ** 2
    return total


# --- adaptive triplet loss (Eq. 4-5) ---

@pytest.mark.parametrize("hardest", [True, False])
@pytest.mark.parametrize("c", [0.0, 0.3, 1.0])
def test_constant_descriptiveness_is_vsepp_with_margin_2c_over_tau(hardest, c):
    image, text = embeddings(12)
    image.requires_grad_()
    text.requires_grad_()
    tau = 6.0
    loss = DITMLoss(tau=tau, order_weight=0.0, hardest_negatives=hardest)(
        image, text, torch.arange(12), torch.full((12,), c))
    assert set(loss) == {"triplet_loss"}
    expected = vsepp_contrastive_loss(image, text, 2 * c / tau, max_violation=hardest)
    torch.testing.assert_close(loss["triplet_loss"], expected)
    assert expected > 0
    grads = torch.autograd.grad(loss["triplet_loss"], (image, text))
    expected_grads = torch.autograd.grad(expected, (image, text))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("hardest", [True, False])
def test_adaptive_margins_match_a_row_by_row_loop_with_shared_images(hardest):
    image, text, ids, delta = grouped_batch()
    ids = ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(1))]  # groups not contiguous
    loss = DITMLoss(tau=6.0, order_weight=0.0, hardest_negatives=hardest)(image, text, ids, delta)["triplet_loss"]
    torch.testing.assert_close(loss, loop_triplet_loss(image, text, ids, delta, 6.0, hardest))


def test_text_negative_margin_uses_both_descriptiveness_scores_and_image_negative_twice_its_own():
    # One image per row, 2 rows: every hinge is active; read each margin off the loss.
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    delta = torch.tensor([0.6, 0.0])
    # s(v, t) = 1 on the pairs, 0 across: each hinge is margin - 1 + 0, clamped.
    same_image = torch.eye(2, dtype=torch.bool)
    loss = adaptive_triplet_loss(image, text, image, text, same_image, delta, delta, tau=0.1)
    margins = [(0.6 + 0.0) / 0.1, 2 * 0.6 / 0.1, (0.0 + 0.6) / 0.1, 2 * 0.0 / 0.1]
    torch.testing.assert_close(loss, torch.tensor(sum(max(m - 1, 0.0) for m in margins)))


def test_captions_of_the_same_image_are_never_negatives():
    # Row 1 is a second caption of image 0 and lies on top of it: with distinct ids it is a violating negative.
    image = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    text = F.normalize(torch.tensor([[1.0, 0.3, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]), dim=-1)
    delta = torch.full((3,), 0.5)
    for hardest in (True, False):
        objective = DITMLoss(order_weight=0.0, hardest_negatives=hardest)
        assert objective(image, text, torch.tensor([0, 0, 1]), delta)["triplet_loss"] == 0
        assert objective(image, text, torch.tensor([0, 1, 2]), delta)["triplet_loss"] > 0


def test_a_batch_of_one_image_has_no_negatives_and_zero_triplet_loss():
    image, text, ids, delta = grouped_batch(images=1, captions=4)
    image.requires_grad_()
    for hardest in (True, False):
        loss = DITMLoss(hardest_negatives=hardest)(image, text, ids, delta)
        assert loss["triplet_loss"] == 0 and torch.isfinite(loss["order_loss"])
        loss["triplet_loss"].backward()
        assert torch.isfinite(image.grad).all()


# --- ordering loss (Eq. 6) ---

def caption_at_distance(image: torch.Tensor, direction: torch.Tensor, distance: float) -> torch.Tensor:
    """Unit vector at Euclidean distance `distance` from the unit vector `image`, towards `direction` (orthogonal)."""
    cosine = 1 - distance**2 / 2
    return cosine * image + math.sqrt(1 - cosine**2) * direction


def test_ordering_loss_is_zero_when_distances_are_inversely_proportional_to_descriptiveness():
    basis = torch.eye(8)
    deltas = [[0.2, 0.5, 0.9], [0.1, 0.3, 0.6]]
    image, text, ids, delta = [], [], [], []
    for k, scores in enumerate(deltas):
        v = basis[4 * k]
        for m, score in enumerate(scores):
            image.append(v)
            text.append(caption_at_distance(v, basis[4 * k + 1 + m], 0.15 / score))  # d = C / delta
            ids.append(k)
            delta.append(score)
    image, text, ids, delta = torch.stack(image), torch.stack(text), torch.tensor(ids), torch.tensor(delta)
    loss = DITMLoss()(image, text, ids, delta)
    assert loss["order_loss"].abs() < 1e-9
    # Swap the two most specific captions of image 0: the order is wrong, the loss is Eq. 6 summed over pairs.
    text[[1, 2]] = text[[2, 1]]
    loss = DITMLoss(order_weight=0.07)(image, text, ids, delta)
    expected = 0.07 * loop_ordering_loss(image, text, ids, delta)
    assert expected > 0.01
    torch.testing.assert_close(loss["order_loss"], expected)


def test_ordering_loss_of_one_pair_is_the_squared_log_ratio_difference():
    v = torch.tensor([[1.0, 0.0, 0.0]]).repeat(2, 1)
    text = torch.stack([caption_at_distance(v[0], torch.tensor([0.0, 1.0, 0.0]), 1.2),
                        caption_at_distance(v[0], torch.tensor([0.0, 0.0, 1.0]), 0.5)])
    delta = torch.tensor([0.3, 0.8])
    loss = DITMLoss(order_weight=1.0)(v, text, torch.tensor([7, 7]), delta)["order_loss"]
    expected = (math.log(1.2 / 0.5) - math.log(0.8 / 0.3)) ** 2
    torch.testing.assert_close(loss, torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_ordering_loss_matches_a_loop_on_random_groups_and_its_floor_keeps_zero_descriptiveness_finite():
    image, text, ids, delta = grouped_batch(images=4, captions=4, seed=3)
    delta[0] = 0.0  # the least descriptive training sentence after min-max normalisation
    text.requires_grad_()
    loss = DITMLoss(order_weight=1.0)(image, text, ids, delta)["order_loss"]
    torch.testing.assert_close(loss, loop_ordering_loss(image, text, ids, delta))
    loss.backward()
    assert torch.isfinite(text.grad).all() and text.grad.abs().sum() > 0


def test_one_caption_per_image_is_an_error_for_the_ordering_loss_only():
    image, text = embeddings(6)
    delta = torch.rand(6)
    with pytest.raises(ValueError, match="several captions per image"):
        DITMLoss()(image, text, torch.arange(6), delta)
    assert set(DITMLoss(order_weight=0.0)(image, text, torch.arange(6), delta)) == {"triplet_loss"}


# --- inputs ---

def test_mismatched_inputs_are_clear_errors():
    image, text = embeddings(6)
    ids, delta = torch.tensor([0, 0, 1, 1, 2, 2]), torch.rand(6)
    objective = DITMLoss()
    with pytest.raises(ValueError, match="pair up"):
        objective(image, text[:5], ids, delta)
    with pytest.raises(ValueError, match="image_ids must be 6"):
        objective(image, text, ids[:5], delta)
    with pytest.raises(ValueError, match="image_ids must be 6"):
        objective(image, text, ids.float(), delta)
    with pytest.raises(ValueError, match="descriptiveness must hold 6"):
        objective(image, text, ids, delta[:, None])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        objective(image, text, ids, delta + 1)


def test_half_precision_embeddings_give_a_float32_loss_equal_to_the_float32_one():
    image, text, ids, delta = grouped_batch()
    half = DITMLoss()(image.bfloat16(), text.bfloat16(), ids, delta)
    full = DITMLoss()(image.bfloat16().float(), text.bfloat16().float(), ids, delta)
    for name in full:
        assert half[name].dtype == torch.float32
        torch.testing.assert_close(half[name], full[name])


# --- the global batch over processes ---

def fake_gather(world_size: int, rank: int):
    """gather_with_grad as on `rank` of `world_size`: the other shards come from the caller's full tensors."""
    shards = {}

    def gather(tensor):
        full = shards.get(tensor.data_ptr())
        assert full is not None, "gather of a tensor the test did not register"
        n = tensor.shape[0]
        return torch.cat([full[:rank * n], tensor, full[(rank + 1) * n:]]), rank * n

    return gather, shards


@pytest.mark.parametrize("hardest", [True, False])
def test_mean_loss_of_the_processes_is_the_loss_of_the_concatenated_batch(monkeypatch, hardest):
    image, text, ids, delta = grouped_batch(images=4, captions=3, seed=5)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(2))  # captions of an image on both ranks
    image, text, ids, delta = image[order], text[order], ids[order], delta[order]
    image.requires_grad_()
    text.requires_grad_()
    objective = DITMLoss(hardest_negatives=hardest)
    full = objective(image, text, ids, delta)
    full_grads = torch.autograd.grad(sum(full.values()), (image, text))

    n = 12 // WORLD_SIZE
    totals = {name: torch.zeros(()) for name in full}
    for rank in range(WORLD_SIZE):
        gather, registered = fake_gather(WORLD_SIZE, rank)
        monkeypatch.setattr(ditm, "gather_with_grad", gather)
        local = slice(rank * n, (rank + 1) * n)
        local_image, local_text = image.float()[local], text.float()[local]  # .float() is a no-op: same storage
        for full_tensor, shard in ((image, local_image), (text, local_text), (ids, ids[local]), (delta, delta[local])):
            registered[shard.data_ptr()] = full_tensor
        terms = objective(local_image, local_text, ids[local], delta[local])
        totals = {name: totals[name] + terms[name] for name in terms}
    # each process returns its share times the number of processes: DDP's mean over processes is the full loss
    for name in full:
        torch.testing.assert_close(totals[name] / WORLD_SIZE, full[name])
    grads = torch.autograd.grad(sum(totals.values()) / WORLD_SIZE, (image, text))
    for grad, expected in zip(grads, full_grads):
        torch.testing.assert_close(grad, expected)


def per_rank_check(reference_path: str) -> None:
    """Run by each torchrun process (`check_against_reference`) between joining and leaving the process group. The
    tensors of the check (some held by the refused call's traceback, a reference cycle: hence `gc.collect`) are gone
    before the group is destroyed: a tensor whose autograd graph went through a gathering collective keeps the group
    alive, and destroying it at interpreter exit aborts the process ("terminate called without an active exception",
    torch 2.13, gloo: about half of the runs before; 0 of 16 after). Under `pytest -n 2` it still aborted once in a
    full run, so the process then leaves without the interpreter's teardown (`os._exit`), its checks done and its
    output flushed."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    check_against_reference(reference_path)
    gc.collect()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def check_against_reference(reference_path: str) -> None:
    """This process's loss, averaged over processes (as DDP averages gradients), is the loss of the whole batch, and
    the gradient of its rows (all_gather's backward sums over processes) is world size times that of the whole
    batch, which DDP's mean of the parameter gradients divides again."""
    import torch.distributed as dist

    rank = dist.get_rank()
    reference = torch.load(reference_path)
    n = reference["image"].shape[0] // dist.get_world_size()
    local = slice(rank * n, (rank + 1) * n)
    image = reference["image"][local].clone().requires_grad_()
    text = reference["text"][local].clone().requires_grad_()
    for hardest in (True, False):
        terms = DITMLoss(hardest_negatives=hardest)(image, text, reference["ids"][local], reference["delta"][local])
        loss = sum(terms.values())
        image_grad, text_grad = torch.autograd.grad(loss, (image, text))
        total = loss.detach().clone()
        dist.all_reduce(total)
        world = dist.get_world_size()
        expected = reference["hardest" if hardest else "all"]
        torch.testing.assert_close(total / world, expected["loss"])
        torch.testing.assert_close(image_grad, world * expected["image_grad"][local])
        torch.testing.assert_close(text_grad, world * expected["text_grad"][local])
    with_one_caption = torch.arange(n) + rank * n
    try:
        DITMLoss()(image, text, with_one_caption, reference["delta"][local])
    except ValueError as error:
        assert "several captions" in str(error)
    else:
        raise AssertionError("one caption per image over the global batch must be refused")


@pytest.mark.slow  # 2 processes under torch.distributed.run
def test_two_gloo_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    image, text, ids, delta = grouped_batch(images=4, captions=2, seed=7)
    order = torch.randperm(8, generator=torch.Generator().manual_seed(4))
    reference = {"image": image[order], "text": text[order], "ids": ids[order], "delta": delta[order]}
    for hardest in (True, False):
        image_leaf = reference["image"].clone().requires_grad_()
        text_leaf = reference["text"].clone().requires_grad_()
        loss = sum(DITMLoss(hardest_negatives=hardest)(image_leaf, text_leaf, reference["ids"],
                                                       reference["delta"]).values())
        image_grad, text_grad = torch.autograd.grad(loss, (image_leaf, text_leaf))
        reference["hardest" if hardest else "all"] = {"loss": loss.detach(), "image_grad": image_grad,
                                                      "text_grad": text_grad}
    path = tmp_path / "reference.pt"
    torch.save(reference, path)
    torchrun(__file__, str(path))


if __name__ == "__main__":
    per_rank_check(*sys.argv[1:])
