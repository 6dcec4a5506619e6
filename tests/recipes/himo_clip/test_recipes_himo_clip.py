"""HiMo-CLIP's recipes and its Long-CLIP baseline, by hand: the released preset and its overrides, Long-CLIP's PCA
reconstruction on a case computed by hand, its first-sentence batches, and both new objectives compiled without
graph breaks (the equality with the official forwards: test_released_recipes_himo_clip.py)."""

import pytest
import torch
import torch.nn.functional as F

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from hf_longclip.objectives import LongCLIPLoss, contrastive_loss, principal_component_reconstruction
from hf_longclip.recipes.himo_clip.task import PRESETS, HiMoCLIPTask
from hf_longclip.recipes.longclip import FirstSentenceCollator, LongCLIPTask, first_sentence


def test_paper_recipe_is_the_default():
    assert HiMoCLIPTask(tiny_himo(), None).options() == PRESETS["paper"]


def test_released_recipe_sets_the_official_choices_and_given_options_override_it():
    options = HiMoCLIPTask(tiny_himo(), None, preset="released").options()
    assert options == dict(hide_tau=0.9, molo_lambda=1.0, hide_scope="local", label_smoothing=0.1,
                           hide_modalities="text", molo_global=True, normalize_components=False, gather_grad=False)
    overridden = HiMoCLIPTask(tiny_himo(), None, preset="released", hide_tau=0.85, gather_grad=True).options()
    assert overridden == {**options, "hide_tau": 0.85, "gather_grad": True}
    assert HiMoCLIPTask(tiny_himo(), None, label_smoothing=0.1).options()["label_smoothing"] == 0.1


@pytest.mark.parametrize("bad, match", [(dict(preset="official"), "preset must be one of"),
                                        (dict(preset="released", label_smoothing=1.0), "label_smoothing"),
                                        (dict(preset="released", hide_scope="batch"), "hide_scope")])
def test_bad_recipe_options_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        HiMoCLIPTask(tiny_himo(), None, **bad)


def test_pca_reconstruction_by_hand():
    """Centred rows with variance 8 along x and 2 along y: one component keeps x, zeroes y; the mean comes back."""
    centred = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    mean = torch.tensor([1.0, -3.0])
    expected = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.0], [0.0, 0.0]]) + mean
    torch.testing.assert_close(principal_component_reconstruction(centred + mean, 1), expected)
    torch.testing.assert_close(principal_component_reconstruction(centred + mean, 32), centred + mean)  # all kept


def test_longclip_loss_terms_by_hand():
    generator = torch.Generator().manual_seed(0)
    image, text, short = (F.normalize(torch.randn(6, 8, generator=generator), dim=-1) for _ in range(3))
    scale = torch.tensor(10.0)
    terms = LongCLIPLoss(num_components=2)(image, text, short, scale)
    coarse = principal_component_reconstruction(image, 2)
    assert not torch.allclose(coarse, image)
    torch.testing.assert_close(terms["long_loss"], contrastive_loss(image, text, image, text, scale,
                                                                    label_smoothing=0.1))
    torch.testing.assert_close(terms["short_loss"], contrastive_loss(coarse, short, coarse, short, scale,
                                                                     label_smoothing=0.1))


@pytest.mark.parametrize("bad, match", [(dict(num_components=0), "num_components"),
                                        (dict(label_smoothing=-0.1), "label_smoothing")])
def test_bad_longclip_options_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        LongCLIPLoss(**bad)


def test_longclip_short_embeddings_must_pair_with_the_images():
    embeds = F.normalize(torch.randn(4, 8), dim=-1)
    with pytest.raises(ValueError, match="pair up one to one"):
        LongCLIPLoss()(embeds, embeds, embeds[:3], torch.tensor(10.0))


def test_first_sentence_batches():
    assert first_sentence("a red circle. a blue square.") == "a red circle."
    assert first_sentence("no full stop") == "no full stop"
    processor = tiny_processor()
    rows = [{"image": image, "caption": caption} for image, caption in zip(random_images(4), CAPTIONS)]
    batch = FirstSentenceCollator(processor)(rows)
    assert len(batch["short_input_ids"]) == len(batch["input_ids"]) == len(batch["pixel_values"]) == 4
    shortest = processor(text=[first_sentence(row["caption"]) for row in rows], padding="longest")["input_ids"]
    assert batch["short_input_ids"].shape == shortest.shape and shortest.shape[1] < batch["input_ids"].shape[1]
    for row, ids, mask in zip(rows, batch["short_input_ids"], batch["short_attention_mask"]):
        expected = processor(text=[first_sentence(row["caption"])], padding="longest")["input_ids"][0]
        assert torch.equal(ids[mask.bool()], expected)
    whole = processor(text=CAPTIONS, padding="longest")["input_ids"]
    torch.testing.assert_close(batch["input_ids"][:, :whole.shape[1]], whole)


def test_longclip_task_trains_both_towers_and_keeps_frozen_rows():
    model = tiny_himo(frozen_position_rows=20).train()
    batch = FirstSentenceCollator(tiny_processor())([{"image": image, "caption": caption} for image, caption in
                                                     zip(random_images(4), CAPTIONS)])
    task = LongCLIPTask(model, None, num_components=2)
    terms = task.compute_loss(model, batch)
    assert set(terms) == {"long_loss", "short_loss"}
    sum(terms.values()).backward()
    positions = model.text_model.embeddings.position_embedding.weight.grad
    assert positions[:20].abs().max() == 0 and positions[20:].abs().max() > 0
    assert model.vision_model.embeddings.patch_embedding.weight.grad.abs().max() > 0
    assert task.options() == dict(objective="longclip", pca_components=2, label_smoothing=0.1)


def test_longclip_task_names_missing_or_misaligned_short_captions():
    model = tiny_himo()
    rows = [{"image": image, "caption": caption} for image, caption in zip(random_images(4), CAPTIONS)]
    batch = FirstSentenceCollator(tiny_processor())(rows)
    task = LongCLIPTask(model, None)
    with pytest.raises(ValueError, match="short_input_ids"):
        task.compute_loss(model, {key: value for key, value in batch.items() if not key.startswith("short_")})
    with pytest.raises(ValueError, match="pair up one to one"):
        task.compute_loss(model, {**batch, "short_input_ids": batch["short_input_ids"][:3],
                                  "short_attention_mask": batch["short_attention_mask"][:3]})


def test_short_captions_at_their_own_length_embed_as_padded_to_the_long_one():
    """Long-CLIP pads the short captions to 248 tokens; the causal text encoder reads nothing past the end of text,
    so padding them to their own longest gives the same embeddings, loss and gradients."""
    model = tiny_himo().train()
    batch = FirstSentenceCollator(tiny_processor())([{"image": image, "caption": caption} for image, caption in
                                                     zip(random_images(4), CAPTIONS)])
    length = batch["input_ids"].shape[1]
    padded = {**batch, **{key: F.pad(batch[key], (0, length - batch[key].shape[1]))
                          for key in ("short_input_ids", "short_attention_mask")}}
    task = LongCLIPTask(model, None, num_components=2)
    results = []
    for inputs in (batch, padded):
        model.zero_grad()
        loss = sum(task.compute_loss(model, inputs).values())
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-6, atol=1e-6)
    scale = max(grad.abs().max().item() for grad in results[1][1])
    for own, long in zip(results[0][1], results[1][1]):  # within 1e-4 of the largest gradient
        torch.testing.assert_close(own, long, rtol=1e-4, atol=1e-4 * scale)


def _embeddings(n: int = 16, dim: int = 24):
    generator = torch.Generator().manual_seed(0)
    return [F.normalize(torch.randn(n, dim, generator=generator), dim=-1).requires_grad_(True) for _ in range(3)]


def test_longclip_loss_compiles_without_graph_breaks():
    """Loss and backward compiled whole (fullgraph: any break is an error) equal the eager ones."""
    objective = LongCLIPLoss(num_components=4)
    scale = torch.tensor(14.0)

    def loss(image, text, short):
        return sum(objective(image, text, short, scale).values())

    eager_inputs, compiled_inputs = _embeddings(), _embeddings()
    expected = loss(*eager_inputs)
    expected.backward()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(*compiled_inputs)
    compiled.backward()
    torch.testing.assert_close(compiled, expected)
    for mine, reference in zip(compiled_inputs, eager_inputs):
        torch.testing.assert_close(mine.grad, reference.grad)


@pytest.mark.parametrize("scope", ["global", "local"])
def test_released_recipe_compiles_without_graph_break(scope):
    """MoLo compiles whole in either HiDe scope, with the paper's choices and with the released recipe's switches
    (components as reconstructed, gathers without gradient, label smoothing): no graph break, so no host sync."""
    image, text, _ = _embeddings()
    scale = torch.tensor(14.0)
    switches = dict(normalize_components=False, gather_grad=False, label_smoothing=0.1)
    for options in ({}, switches):
        objective = HiMoCLIPTask(tiny_himo(), None, hide_scope=scope, **options).objective
        torch._dynamo.reset()
        explained = torch._dynamo.explain(lambda i, t: sum(objective(i, t, scale).values()))(image, text)
        assert explained.graph_break_count == 0, (options, explained.break_reasons)
        assert explained.graph_count == 1
