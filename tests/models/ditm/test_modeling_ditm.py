"""DITMModel (CLIP towers + GPO image pooling), the multi-caption collator and the DITM task with its warm-up: each
checked against an independent computation (CLIP's own features, GPO applied by hand, the objective on repeated
images), plus remote-code loading without the library and the DITM objective on HiMo-CLIP's backbone."""

import filecmp
from pathlib import Path

import pytest
import torch

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_himo, tiny_processor, tiny_sub_configs
from helpers.ditm import ditm_processor, tiny_ditm
from helpers.fresh_process import FRESH_PROCESS_PRELUDE, load_in_fresh_process
from hf_longclip import DITMConfig, DITMModel
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.export import model_bundle
from hf_longclip.objectives.ditm import DITMLoss
from hf_longclip.recipes.ditm.task import DITMTask, MultiCaptionCollator
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import train

REPO = Path(__file__).resolve().parents[3]

FRESH_PROCESS_DITM = FRESH_PROCESS_PRELUDE + """
with torch.no_grad():
    out = model(**inputs, return_loss=True)
torch.save({"text": out.text_embeds, "image": out.image_embeds, "loss": out.loss,
            "classes": [type(model).__module__, type(processor).__module__]}, output)
"""




def test_from_clip_keeps_clip_text_features_and_pools_projected_tokens_with_gpo():
    clip = tiny_clip()
    model = DITMModel.from_clip(clip).eval()
    assert model.config.text_config.max_position_embeddings == 77
    inputs = tiny_processor(max_length=77)(text=CAPTIONS[:3], images=random_images(3))
    with torch.no_grad():
        torch.testing.assert_close(model.get_text_features(input_ids=inputs["input_ids"]).pooler_output,
                                   clip.get_text_features(input_ids=inputs["input_ids"]).pooler_output)
        hidden = clip.vision_model(pixel_values=inputs["pixel_values"]).last_hidden_state
        tokens = clip.visual_projection(clip.vision_model.post_layernorm(hidden))  # (3, 17, 16)
        # GPO by hand: each dimension's values sorted descending, weighted by the pooler's weights for 17 tokens
        weights = model.image_pooler(tokens)[1][0]
        expected = (tokens.sort(dim=1, descending=True).values * weights[None, :, None]).sum(dim=1)
        torch.testing.assert_close(model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output,
                                   expected)
    assert torch.allclose(weights.sum(), torch.tensor(1.0)) and not torch.allclose(weights, weights[0])


def test_from_clip_of_a_ditm_base_keeps_its_trained_gpo_so_fine_tuning_starts_as_the_base():
    base = tiny_ditm(seed=3).eval()
    with torch.no_grad():  # a GPO unlike any fresh one: the base's pooling is not re-initialised
        base.image_pooler.linear.weight.mul_(-3.0)
    model = DITMModel.from_clip(base, stretch_positions=False).eval()
    inputs = ditm_processor()(text=CAPTIONS[:3], images=random_images(3), padding="longest")
    with torch.no_grad():
        expected, out = base(**inputs), model(**inputs)
    torch.testing.assert_close(out.image_embeds, expected.image_embeds, rtol=0, atol=0)
    torch.testing.assert_close(out.text_embeds, expected.text_embeds, rtol=0, atol=0)
    assert not model.logit_scale.requires_grad


def test_several_texts_per_image_encode_each_image_once_with_the_same_loss():
    model = tiny_ditm()
    task = DITMTask(model, None)
    processor = ditm_processor()
    images, captions = random_images(2), CAPTIONS[:4]
    descriptiveness = torch.tensor([0.2, 0.9, 0.4, 0.7])
    index = torch.tensor([0, 0, 1, 1])
    once = processor(text=captions, images=images)
    repeated = processor(text=captions, images=[images[i] for i in index])
    with torch.no_grad():
        out = model(**once)
        terms = task.compute_loss(model, {**once, "descriptiveness": descriptiveness, "image_ids": index + 10,
                                          "text_image_index": index})
        reference = model(**repeated)
        reference_terms = task.compute_loss(model, {**repeated, "descriptiveness": descriptiveness,
                                                    "image_ids": index + 10, "text_image_index": torch.arange(4)})
    assert set(terms) == {"triplet_loss", "order_loss"}
    assert out.image_embeds.shape[0] == 2 and out.logits_per_image.shape == (2, 4)
    for term in terms:
        torch.testing.assert_close(terms[term], reference_terms[term])
    # by hand: the objective (the task's defaults, tau 6 and lambda 0.07) on the repeated embeddings
    direct = DITMLoss(6.0, 0.07)(reference.image_embeds, reference.text_embeds, index + 10, descriptiveness)
    torch.testing.assert_close(sum(terms.values()), sum(direct.values()))


def test_forward_loss_is_clip_infonce_and_the_task_loss_without_descriptiveness_is_a_clear_error():
    model, processor = tiny_ditm(), ditm_processor()
    inputs = processor(text=CAPTIONS[:2], images=random_images(2))
    with torch.no_grad():
        out = model(**inputs, return_loss=True)  # the model's own loss needs no descriptiveness
    labels = torch.arange(2)
    expected = (torch.nn.functional.cross_entropy(out.logits_per_text, labels)
                + torch.nn.functional.cross_entropy(out.logits_per_image, labels)) / 2
    torch.testing.assert_close(out.loss, expected)
    with pytest.raises(ValueError, match="descriptiveness"):  # e.g. a batch of ImageTextCollator's
        DITMTask(model, ImageTextCollator(processor)).compute_loss(model, inputs)


def test_task_options_defaults_and_validation():
    model = tiny_ditm()
    assert not hasattr(model, "objective") and not hasattr(model.config, "order_weight")
    task = DITMTask(model, None)
    assert task.options() == {"margin_scale": 6.0, "order_weight": 0.07, "warmup_steps": 0}
    assert (task.objective.tau, task.objective.order_weight) == (6.0, 0.07)
    task = DITMTask(model, None, margin_scale=4.0, order_weight=0.0, warmup_steps=3)
    assert task.options() == {"margin_scale": 4.0, "order_weight": 0.0, "warmup_steps": 3}
    assert (task.objective.tau, task.objective.order_weight) == (4.0, 0.0)
    for bad in (dict(order_weight=-0.1), dict(margin_scale=0.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DITMTask(model, None, **bad)


def test_logit_scale_is_frozen_and_only_gpo_is_new_in_from_clip():
    assert not tiny_ditm().logit_scale.requires_grad  # DITM scores are cosine similarities: no temperature to learn
    assert DITMModel.new_weight_prefixes == ("image_pooler.",)


def test_checkpoint_loads_without_the_library_and_ships_the_generated_bundle(tmp_path):
    model, processor = tiny_ditm(), ditm_processor()
    path = tmp_path / "ckpt"
    model.save_pretrained(path)
    processor.save_pretrained(path)
    written = sorted(p.name for p in path.glob("*.py"))
    assert written == sorted(model_bundle("ditm"))
    for name in written:
        assert filecmp.cmp(path / name, REPO / "modeling" / name, shallow=False), name
    images = random_images(3)
    for i, image in enumerate(images):
        image.save(path / f"image{i}.png")
    inputs = processor(text=CAPTIONS[:3], images=images)
    with torch.no_grad():
        expected = model(**inputs, return_loss=True)
    loaded = load_in_fresh_process(path, CAPTIONS[:3], tmp_path, FRESH_PROCESS_DITM)
    assert all(module.startswith("transformers_modules.") for module in loaded["classes"])
    torch.testing.assert_close(loaded["text"], expected.text_embeds, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loaded["image"], expected.image_embeds, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loaded["loss"], expected.loss, atol=1e-5, rtol=1e-6)


def scene_rows(n: int = 8, captions: int = 3) -> list[dict]:
    images = random_images(n)
    return [{"image": images[i], "image_id": 100 + i,
             "captions": [f"{CAPTIONS[(i + j) % len(CAPTIONS)]} {j}" for j in range(captions)],
             "descriptiveness": [0.1 + 0.3 * j for j in range(captions)]} for i in range(n)]


def test_collator_draws_distinct_captions_of_each_image_with_aligned_scores_and_ids():
    rows = scene_rows(4)
    collate = MultiCaptionCollator(ditm_processor(), captions_per_image=2)
    batch = collate(rows)
    assert batch["pixel_values"].shape[0] == 4 and batch["input_ids"].shape[0] == 8
    assert batch["text_image_index"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert batch["image_ids"].tolist() == [100, 100, 101, 101, 102, 102, 103, 103]
    texts = ditm_processor().batch_decode(batch["input_ids"], skip_special_tokens=True)
    for t, (image, delta) in enumerate(zip(batch["text_image_index"].tolist(), batch["descriptiveness"].tolist())):
        chosen = [j for j, caption in enumerate(rows[image]["captions"])
                  if caption.replace(" ", "") == texts[t].replace(" ", "")]
        assert len(chosen) == 1 and delta == pytest.approx(rows[image]["descriptiveness"][chosen[0]])
    assert all(texts[2 * i] != texts[2 * i + 1] for i in range(4))  # drawn without replacement
    again = collate(rows)  # the draw depends on the batch only: a resumed run draws the same captions
    assert torch.equal(again["input_ids"], batch["input_ids"])
    draws = {tuple(collate(rows[:2] + rows[k:k + 1])["descriptiveness"][:4].tolist()) for k in range(2, 4)}
    draws |= {tuple(MultiCaptionCollator(ditm_processor(), 2, seed=s)(rows)["descriptiveness"].tolist())
              for s in range(4)}
    assert len(draws) > 1  # other batches, other seeds: other captions


def test_collator_refuses_too_few_captions():
    with pytest.raises(ValueError, match="captions_per_image must be >= 2"):
        MultiCaptionCollator(ditm_processor(), captions_per_image=1)
    with pytest.raises(ValueError, match="image 100 has 2 captions"):
        MultiCaptionCollator(ditm_processor(), captions_per_image=3)(scene_rows(2, captions=2))


class RowList(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def test_warm_up_freezes_the_vision_transformer_and_sums_all_negatives_then_mines_the_hardest(accelerator, tmp_path):
    model = tiny_ditm().train()
    task = DITMTask(model, MultiCaptionCollator(ditm_processor(), 2), warmup_steps=2)
    vision = {name: p.detach().clone() for name, p in model.named_parameters() if name.startswith("vision_model.")}
    others = {name: p.detach().clone() for name, p in model.named_parameters()
              if name.startswith(("image_pooler.", "visual_projection.", "text_projection."))}
    args = LoopArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, warmup_steps=0,
                         logging_steps=1, learning_rate=1e-3)
    _, history = train(task, RowList(scene_rows(8)), args, accelerator, run_name="warm")
    assert [record["warm_up"] for record in history] == [1.0, 1.0]
    assert all(torch.equal(p, vision[name]) for name, p in model.named_parameters() if name in vision)
    assert all(not torch.equal(p, others[name]) for name, p in model.named_parameters() if name in others)
    assert task.state_dict() == {"steps_done": 2} and task.objective.hardest_negatives is False
    # a resumed run (fresh model, task state restored) is past the warm-up: hardest negatives, vision trains
    fresh = tiny_ditm().train()
    resumed = DITMTask(fresh, task.collate_fn, warmup_steps=2)
    resumed.load_state_dict(task.state_dict())
    assert not resumed.warming_up
    resumed.compute_loss(fresh, task.collate_fn(scene_rows(4)))
    assert resumed.objective.hardest_negatives
    assert all(p.requires_grad for name, p in fresh.named_parameters() if name.startswith("vision_model."))


def test_ditm_objective_trains_himo_clip_backbone(accelerator, tmp_path):
    model = tiny_himo().train()
    processor = tiny_processor()
    task = DITMTask(model, MultiCaptionCollator(processor, 3), order_weight=0.07)
    args = LoopArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, warmup_steps=0,
                         logging_steps=1, learning_rate=1e-3)
    before = model.text_model.final_layer_norm.weight.detach().clone()
    _, history = train(task, RowList(scene_rows(8)), args, accelerator, run_name="himo")
    assert {"triplet_loss", "order_loss"} <= set(history[0])
    assert all(torch.isfinite(torch.tensor(record["loss"])) for record in history)
    assert not torch.equal(before, model.text_model.final_layer_norm.weight)


def test_init_weights_covers_the_gpo_pooler():
    """Weights absent from a checkpoint are drawn by `_init_weights`; CLIP's leaves GRUs out, DITM's covers them."""
    with torch.device("meta"):
        model = DITMModel(DITMConfig(**tiny_sub_configs(248)))
    model.to_empty(device="cpu")
    for param in model.parameters():
        param.data.fill_(float("nan"))
    model.init_weights()
    assert all(torch.isfinite(param).all() for param in model.parameters())
    bound = 1 / 32 ** 0.5
    assert all(param.abs().max() <= bound for param in model.image_pooler.gru.parameters())


def test_lora_trains_only_adapters_with_the_ditm_task_and_merges(accelerator, tmp_path):
    from hf_longclip.training.lora import LoraArguments, apply_lora, merge_lora

    model = tiny_ditm().train()
    base = {name: p.detach().clone() for name, p in model.named_parameters()}
    peft_model = apply_lora(model, LoraArguments(lora_r=4, lora_target_modules="q_proj,v_proj"))
    task = DITMTask(peft_model, MultiCaptionCollator(ditm_processor(), 2))
    args = LoopArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, warmup_steps=0,
                         learning_rate=1e-2)
    trained, _ = train(task, RowList(scene_rows(8)), args, accelerator, run_name="lora")
    merged = merge_lora(accelerator.unwrap_model(trained))
    assert type(merged) is DITMModel
    changed = {name for name, p in merged.named_parameters() if not torch.equal(p, base[name])}
    assert changed and all(name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed)
    merged.save_pretrained(tmp_path / "merged")
    reloaded = DITMModel.from_pretrained(tmp_path / "merged")
    assert all(torch.equal(p, dict(merged.named_parameters())[name]) for name, p in reloaded.named_parameters())


def test_model_card_renders_the_table_iv_metrics(tmp_path):
    from hf_longclip.recipes.ditm.card import CARD as DITM_CARD
    from hf_longclip.training.hub import build_model_card

    results = {"r1_i2t": 41.5, "r1_t2i": 30.25, "rsum": 350.0, "precision": 0.5, "recall": 0.625, "d_corr": 0.4,
               "d_corr_image": 0.3}
    model = tiny_ditm()
    config = {**model.config.to_dict(), **DITMTask(model, None).options()}  # as `publish` merges them
    card = str(build_model_card(DITM_CARD.template, repo_id="org/ditm-tiny", info=DITM_CARD,
                                results=results, config=config, training_args={"variant": "adaptive"}))
    assert "model-index" in card and "value: 41.5" in card and "| d_corr (image) | 0.3" in card
    assert "| R@1 I2T | 41.5" in card and "| tau / lambda | 6.0 / 0.07 |" in card
    assert "# ditm-tiny" in card and "DITM (Jang et al." in card
