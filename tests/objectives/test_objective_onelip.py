"""OneLIP's objective: TRIM-Select scores (Eq. 4-5) hand-computed, padding never selected, K beyond the text,
TRIM-Refine (Eq. 6), L_coarse (Eq. 3), L_token-wise (Eq. 7), Eq. 1 and Eq. 10's schedule, and bad inputs."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from transformers import CLIPTextConfig, CLIPTextModel

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_processor
from helpers.onelip import run_objective
from hf_longclip import OneLIPForPreTraining
from hf_longclip.models.onelip.modeling_onelip import TRIMRefine, text_token_mask
from hf_longclip.objectives.onelip import (
    OneLIPLoss,
    coarse_loss,
    orthonormal_columns,
    token_wise_loss,
    top_right_singular_vectors,
    trim_scores,
    trim_select,
)
from hf_longclip.recipes.onelip.task import OneLIPTask


def _small_text():
    """4 valid tokens with orthogonal states (so U is the identity up to sign and sigma = [4, 3, 2, 1]) and one
    padding token, large and aligned with the image."""
    states = torch.tensor([[[4.0, 0, 0, 0], [0, 3, 0, 0], [0, 0, 2, 0], [0, 0, 0, 1], [10, 10, 10, 30]]])
    valid = torch.tensor([[True, True, True, True, False]])
    image = F.normalize(torch.tensor([[0.0, 0, 1, 3]]), dim=-1)
    return states, valid, image


def test_trim_scores_hand_computed():
    states, valid, image = _small_text()
    # Eq. 4, r = 2: I = [4, 3, 0, 0] -> min-max [1, 0.75, 0, 0]
    # A = cos(z_i, image) = [0, 0, 1/sqrt(10), 3/sqrt(10)] -> min-max [0, 0, 1/3, 1]
    # Eq. 5, alpha = 0.4: S = 0.6 I + 0.4 A
    expected = torch.tensor([[0.6, 0.45, 0.4 / 3, 0.4, -math.inf]])
    torch.testing.assert_close(trim_scores(states, states, image, valid, rank=2, alpha=0.4), expected)
    # r = 4 takes every direction: I = [4, 3, 2, 1] -> [1, 2/3, 1/3, 0]
    expected_r4 = torch.tensor([[0.6, 0.4, 0.2 + 0.4 / 3, 0.4, -math.inf]])
    torch.testing.assert_close(trim_scores(states, states, image, valid, rank=4, alpha=0.4), expected_r4)
    # alpha = 0: structure only; alpha = 1: relevance only
    torch.testing.assert_close(trim_scores(states, states, image, valid, 2, 0.0)[0, :4], torch.tensor([1, 0.75, 0, 0]))
    torch.testing.assert_close(trim_scores(states, states, image, valid, 2, 1.0)[0, :4], torch.tensor([0, 0, 1 / 3, 1]))


def test_the_hand_computed_scores_hold_for_every_decomposition():
    states, valid, image = _small_text()
    expected = trim_scores(states, states, image, valid, rank=2, alpha=0.4, decomposition="exact")
    for decomposition in ("subspace", "auto"):
        torch.testing.assert_close(trim_scores(states, states, image, valid, 2, 0.4, decomposition), expected)
    with pytest.raises(ValueError, match="decomposition"):
        trim_scores(states, states, image, valid, 2, 0.4, "svd")


def token_states(batch: int = 6, tokens: int = 248, width: int = 64, seed: int = 0) -> torch.Tensor:
    """Token states like a transformer's: a few strong shared directions (decaying spectrum) plus noise."""
    generator = torch.Generator().manual_seed(seed)
    strengths = torch.tensor([30.0, 12, 8, 6, 5, 4, 3.5, 3, 2.5, 2, 1.5, 1.2])
    directions = torch.linalg.qr(torch.randn(width, len(strengths), generator=generator)).Q
    loadings = torch.randn(batch, tokens, len(strengths), generator=generator) * strengths
    return loadings @ directions.T + 0.3 * torch.randn(batch, tokens, width, generator=generator)


def test_subspace_iteration_finds_the_svds_top_directions():
    states = token_states()
    for rank in (1, 4, 8):
        found = top_right_singular_vectors(states, rank, "subspace")
        reference = torch.linalg.svd(states.double(), full_matrices=False).Vh[:, :rank].mT  # (B, d, r)
        alignment = (found.double() * reference).sum(dim=1).abs()  # |cos| of matching columns (unit, up to sign)
        assert alignment.min() > 0.999, (rank, alignment.min())
        exact = top_right_singular_vectors(states, rank, "exact")
        assert exact.dtype == torch.float64 and ((exact * reference).sum(dim=1).abs() > 1 - 1e-9).all()


def test_subspace_scores_and_selection_match_the_exact_ones():
    states = token_states(seed=1)
    valid = torch.ones(states.shape[:2], dtype=torch.bool)
    valid[:, 200:] = False  # padding
    generator = torch.Generator().manual_seed(2)
    token_embeds, image = torch.randn(6, 248, 16, generator=generator), torch.randn(6, 16, generator=generator)
    exact = trim_scores(states, token_embeds, image, valid, rank=8, alpha=0.5, decomposition="exact")
    fast = trim_scores(states, token_embeds, image, valid, rank=8, alpha=0.5, decomposition="subspace")
    torch.testing.assert_close(fast, exact, atol=2e-3, rtol=0)
    top_exact, top_fast = exact.topk(100).indices.sort().values, fast.topk(100).indices.sort().values
    assert (top_exact == top_fast).float().mean() > 0.97
    assert torch.equal(trim_scores(states, token_embeds, image, valid, 8, 0.5, "auto"), exact)  # CPU: exact


def test_top_k_in_text_order_and_padding_never_selected():
    states, valid, image = _small_text()
    scores = trim_scores(states, states, image, valid, rank=2, alpha=0.4)
    selected, kept = trim_select(states, scores, top_k=3)
    torch.testing.assert_close(selected, states[:, [0, 1, 3]])  # S = [0.6, 0.45, 0.13, 0.4]: tokens 0, 1, 3
    assert kept.all()
    for alpha in (0.0, 0.5, 1.0):  # the padding token is the largest and the most image-like: still never kept
        scores = trim_scores(states, states, image, valid, rank=4, alpha=alpha)
        selected, kept = trim_select(states, scores, top_k=4)
        assert not (selected == states[:, 4:5]).all(-1).any()


def test_k_larger_than_the_text_keeps_its_valid_tokens_and_masks_the_rest():
    states, valid, image = _small_text()
    selected, kept = trim_select(states, trim_scores(states, states, image, valid, 2, 0.5), top_k=100)
    assert selected.shape == (1, 5, 4) and kept.tolist() == [[True, True, True, True, False]]
    torch.testing.assert_close(selected, states)  # text order
    refine = TRIMRefine(3, 4)
    torch.nn.init.normal_(refine.queries)
    out = refine(selected, kept)
    expected = torch.softmax(refine.queries @ states[0, :4].T / 2.0, dim=-1) @ states[0, :4]  # Eq. 6 on valid tokens
    torch.testing.assert_close(out[0], expected)
    moved = selected.clone()
    moved[:, 4] = 1e3  # what sits in a masked slot never matters
    torch.testing.assert_close(refine(moved, kept), out)


def test_valid_tokens_end_at_the_end_of_text_token_and_respect_the_mask():
    ids = torch.tensor([[0, 5, 6, 1, 1, 1], [0, 5, 1, 7, 8, 1]])
    assert text_token_mask(ids, None, 1).tolist() == [[True] * 4 + [False] * 2, [True] * 3 + [False] * 3]
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    assert text_token_mask(ids, mask, 1).tolist() == [[True] * 4 + [False] * 2, [True] * 2 + [False] * 4]


def test_coarse_and_token_wise_losses_hand_computed():
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    valid = torch.tensor([[True, True, True], [True, True, False]])
    # Eq. 3: one cosine of the two matrices (valid rows), per text
    flat = [F.cosine_similarity(student[b][valid[b]].flatten(), teacher[b][valid[b]].flatten(), dim=0) for b in (0, 1)]
    torch.testing.assert_close(coarse_loss(student, teacher, valid), 1 - torch.stack(flat).mean())
    # Eq. 7: mean over valid tokens of 1 - per-token cosine, per text
    per_text = [(1 - F.cosine_similarity(student[b][valid[b]], teacher[b][valid[b]], dim=-1)).mean() for b in (0, 1)]
    torch.testing.assert_close(token_wise_loss(student, teacher, valid), torch.stack(per_text).mean())


def _objective_inputs(batch=3, length=6, width=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(batch, length, width, generator=generator)
    return dict(
        image_embeds=F.normalize(torch.randn(batch, 5, generator=generator), dim=-1),
        text_embeds=F.normalize(torch.randn(batch, 5, generator=generator), dim=-1),
        logit_scale=torch.tensor(3.0),
        text_states=states,
        token_embeds=torch.randn(batch, length, 5, generator=generator),
        valid=torch.ones(batch, length, dtype=torch.bool),
        teacher_states=torch.randn(batch, 4, width, generator=generator),
    )


def test_eq_10_terms_and_the_weight_schedule():
    inputs = _objective_inputs()
    refine = TRIMRefine(4, 4)
    torch.nn.init.normal_(refine.queries)
    objective = OneLIPLoss(alpha=0.5, top_k=3, rank=2, weights=(0.2, 0.1, 0.7), weights_after=(0.05, 0.25, 0.7),
                           switch_step=5000)
    before = run_objective(objective, inputs, refine, step=4999)
    after = run_objective(objective, inputs, refine, step=5000)
    assert set(before) == {"coarse_loss", "token_loss", "contrastive_loss"}
    logits = 3.0 * inputs["image_embeds"] @ inputs["text_embeds"].T
    labels = torch.arange(3)
    contrastive = F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)  # L_i-t + L_t-i (Eq. 1)
    torch.testing.assert_close(before["contrastive_loss"], 0.7 * contrastive)
    coarse = coarse_loss(inputs["text_states"][:, :4], inputs["teacher_states"], inputs["valid"][:, :4])
    torch.testing.assert_close(before["coarse_loss"], 0.2 * coarse)
    torch.testing.assert_close(after["coarse_loss"], 0.05 * coarse)
    torch.testing.assert_close(after["token_loss"], 2.5 * before["token_loss"])
    scores = trim_scores(inputs["text_states"], inputs["token_embeds"], inputs["image_embeds"], inputs["valid"], 2, 0.5)
    aggregated = refine(*trim_select(inputs["text_states"], scores, 3))
    token = token_wise_loss(aggregated, inputs["teacher_states"], inputs["valid"][:, :4])
    torch.testing.assert_close(before["token_loss"], 0.1 * token)


def test_gradients_reach_the_queries_and_the_selected_states_only_through_trim_refine():
    inputs = _objective_inputs()
    inputs["text_states"].requires_grad_(True)
    refine = TRIMRefine(4, 4)
    torch.nn.init.normal_(refine.queries)
    terms = run_objective(OneLIPLoss(top_k=2, weights=(0.0, 1.0, 0.0)), inputs, refine)
    sum(terms.values()).backward()
    assert refine.queries.grad.abs().sum() > 0
    touched = inputs["text_states"].grad.abs().sum(-1) > 0
    assert (touched.sum(1) == 2).all()  # exactly the K = 2 selected tokens of each text


def test_bad_inputs_raise_clear_errors():
    inputs, refine = _objective_inputs(), TRIMRefine(4, 4)
    objective = OneLIPLoss()
    with pytest.raises(ValueError, match="width 6 differs"):
        run_objective(objective, {**inputs, "teacher_states": torch.randn(3, 4, 6)}, refine)
    names = {"text_states": "long text encoder states", "teacher_states": "teacher states",
             "image_embeds": "image embeddings", "text_embeds": "text embeddings"}
    for (name, named), value, kind in itertools.product(names.items(), ("nan", "inf"), ("exact", "subspace", "pooled")):
        broken = inputs[name].clone()
        broken.view(-1)[5] = float(value)
        distillation, decomposition = ("pooled", "auto") if kind == "pooled" else ("trim", kind)
        with pytest.raises(ValueError, match=f"the {named} contain NaN or inf"):
            run_objective(OneLIPLoss(distillation=distillation, decomposition=decomposition), {**inputs, name: broken},
                          refine)
    with pytest.raises(ValueError, match="non-empty"):
        run_objective(objective, {k: v[:0] if v.ndim else v for k, v in inputs.items()}, refine)

    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip)
    batch = dict(tiny_processor()(text=CAPTIONS, images=random_images(4), padding="longest"))
    no_end = batch["input_ids"].clone()
    no_end[no_end == 1] = 5
    with pytest.raises(ValueError, match="end-of-text"):
        model.onelip.get_text_features(no_end)
    with pytest.raises(ValueError, match="end-of-text"):
        model(**{**batch, "input_ids": no_end})
    with pytest.raises(ValueError, match="end-of-text"):
        OneLIPTask(model, None, teacher=clip).compute_loss(model, {**batch, "input_ids": no_end})
    # Eq. 10 distils from the teacher, which the task holds: the model's own loss needs none (CLIP's InfoNCE)
    with torch.no_grad():
        out = model(**batch, return_loss=True)
    labels = torch.arange(4)
    torch.testing.assert_close(out.loss, (F.cross_entropy(out.logits_per_text, labels)
                                          + F.cross_entropy(out.logits_per_image, labels)) / 2)
    empty = {k: v[:0] for k, v in batch.items()}
    with pytest.raises(ValueError, match="non-empty"):
        model(**empty, return_loss=True)
    narrow = CLIPTextModel(CLIPTextConfig(vocab_size=80, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, bos_token_id=0, eos_token_id=1, pad_token_id=1))
    with pytest.raises(ValueError, match="width 16 differs"):
        OneLIPTask(model, None, teacher=narrow).compute_loss(model, batch)


def test_batched_orthonormalisation_spans_qrs_columns():
    """`orthonormal_columns` (subspace iteration's batched orthonormalisation) gives QR's Q up to column signs, also
    on the ill-conditioned products of the iteration, and orthonormal columns spanning a rank-deficient matrix."""
    generator = torch.Generator().manual_seed(0)
    gram = (lambda z: z.mT @ z)(torch.randn(5, 40, 24, generator=generator) * torch.logspace(0, -3, 24))
    products = gram @ gram @ torch.randn(5, 24, 12, generator=generator)  # condition number ~1e6
    for matrix in (torch.randn(5, 24, 12, generator=generator), products):
        found, reference = orthonormal_columns(matrix), torch.linalg.qr(matrix).Q
        torch.testing.assert_close(found.mT @ found, torch.eye(12).expand(5, -1, -1), atol=1e-5, rtol=0)
        torch.testing.assert_close((found * reference).sum(dim=1).abs(), torch.ones(5, 12), atol=1e-3, rtol=0)
    deficient = torch.randn(3, 24, 2, generator=generator) @ torch.randn(3, 2, 6, generator=generator)
    found = orthonormal_columns(deficient)
    torch.testing.assert_close(found @ (found.mT @ deficient), deficient, atol=1e-4, rtol=0)
    torch.testing.assert_close(found.mT @ found, torch.eye(6).expand(3, -1, -1), atol=1e-5, rtol=0)
