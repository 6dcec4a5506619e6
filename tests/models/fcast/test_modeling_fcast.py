"""F-CAST's model and its task's two-level loss: Eq. 7-8 against a direct transcription (loops over images, captions and
sub-captions), FLAIR's pair construction, Sec. 4.1's initial temperatures and biases, the hierarchical text encoder
(chunks packed into one batch, stage 2 over the first N), grounding maps, clear errors, and 2-process DDP equal to
one process on the concatenated batch; the Table 2 baselines (ViT, CLIP's flat text encoder, FLAIR's flat loss
against a transcription of its released formula)."""

import sys

import pytest
import torch
import torch.nn.functional as F

from helpers.fcast import (
    CAPTIONS,
    TABLE2,
    fcast_task,
    tiny_config,
    tiny_fcast,
    tiny_processor,
    training_inputs,
)
from helpers.launch import torchrun
from hf_longclip import FCASTModel
from hf_longclip.models.fcast import FCASTTextConfig
from hf_longclip.objectives.fcast import part_level_queries
from hf_longclip.recipes.fcast.task import FCASTTask

WORLD_SIZE = 2

def transcribed_loss(model: FCASTModel, inputs: dict) -> dict:
    """Eq. 6-8 written out pair by pair: part level for image i and caption j over sub-captions k (all k when
    j = i, k = j mod K otherwise: FLAIR's pairs), whole level for every (i, j); each summed and divided by B."""
    vision = model.get_image_features(inputs["pixel_values"], inputs["superpixels"])
    text = model.get_text_features(inputs["input_ids"], inputs["attention_mask"])
    v_coarse, t_long = F.normalize(vision.pooler_output, dim=-1), F.normalize(text.pooler_output, dim=-1)
    v_fine, padding = vision.segment_tokens[1], vision.segment_masks[1] == 0
    t_sub = text.sub_caption_embeds
    batch, k = t_sub.shape[:2]
    tau_p, b_p = model.part_logit_scale.exp(), model.part_logit_bias
    tau_w, b_w = model.logit_scale.exp(), model.logit_bias
    part = whole = 0.0
    for i in range(batch):
        for j in range(batch):
            y = 1.0 if i == j else -1.0
            for kk in range(k):
                if i != j and kk != j % k:
                    continue
                v_tg, _ = model.grounding_pool(t_sub[j, kk][None, None], v_fine[i][None], padding[i][None])  # Eq. 6
                cosine = F.cosine_similarity(v_tg[0, 0], t_sub[j, kk], dim=0)
                part = part - F.logsigmoid(y * (tau_p * cosine + b_p))  # Eq. 7
            whole = whole - F.logsigmoid(y * (tau_w * (v_coarse[i] @ t_long[j]) + b_w))  # Eq. 8
    return {"part_loss": part / batch, "whole_loss": whole / batch}


def transcribed_flair_loss(model: FCASTModel, inputs: dict) -> dict:
    """FLAIR's released loss written out: L_tcs over its downsampled pairs (own K sub-captions positive, one of every
    other image negative), summed and divided by K + B - 1; L_mps of the global image against all B x T texts (its
    own positive; T = K, plus t^long with a hierarchical text encoder) divided by B x T; one scale and bias."""
    vision = model.get_image_features(inputs["pixel_values"], inputs["superpixels"])
    text = model.get_text_features(inputs["input_ids"], inputs["attention_mask"])
    if model.config.vision_backbone == "vit":
        tokens, padding = vision.last_hidden_state[:, 1:], None
    else:
        stage = model.config.grounding_stage
        tokens, padding = vision.segment_tokens[stage], vision.segment_masks[stage] == 0
    t_sub, image = text.sub_caption_embeds, F.normalize(vision.pooler_output, dim=-1)
    batch, k = t_sub.shape[:2]
    scale, bias = model.logit_scale.exp(), model.logit_bias
    texts = [list(F.normalize(t_sub[j], dim=-1)) for j in range(batch)]
    if model.config.text_config.is_hierarchical:
        for j in range(batch):
            texts[j].append(F.normalize(text.pooler_output[j], dim=-1))
    tcs = mps = 0.0
    for i in range(batch):
        pad = None if padding is None else padding[i][None]
        for j in range(batch):
            y = 1.0 if i == j else -1.0
            for kk in range(k):
                if i == j or kk == j % k:
                    pooled, _ = model.grounding_pool(t_sub[j, kk][None, None], tokens[i][None], pad)
                    tcs = tcs - F.logsigmoid(
                        y * (scale * F.cosine_similarity(pooled[0, 0], t_sub[j, kk], dim=0) + bias))
            for t in texts[j]:
                mps = mps - F.logsigmoid(y * (scale * image[i] @ t + bias))
    per_image = len(texts[0])
    return {"text_conditioned_loss": tcs / (k + batch - 1) / 2, "multi_positive_loss": mps / (batch * per_image) / 2}


@pytest.mark.parametrize("row", ["flair", "flair-cast", "flair-cast-hier"])
def test_flair_loss_matches_its_released_formula(row):
    model = tiny_fcast(row=row).eval()
    task = fcast_task(model, row)
    inputs = training_inputs(row=row)
    terms = task.compute_loss(model, inputs)
    expected = transcribed_flair_loss(model, inputs)
    assert set(terms) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(terms[name], value.reshape(()), atol=1e-5, rtol=1e-5)
    sum(terms.values()).backward()  # FLAIR has one scale and bias: F-CAST's part-level pair is frozen, all else trains
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    missing = [name for name, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert frozen == {"part_logit_scale", "part_logit_bias"} and missing == []


def test_flat_text_encoder_reads_a_caption_as_one_truncated_text():
    model, processor = tiny_fcast(row="flair").eval(), tiny_processor(num_chunks=1)
    assert model.text_stage2 is None and model.text_adapter is None
    inputs = processor(text=CAPTIONS)
    assert inputs["input_ids"].shape == (4, 1, 16)  # the whole caption, one chunk, truncated to 16 tokens
    plain = processor.tokenizer(CAPTIONS, padding="max_length", truncation=True, max_length=16, return_tensors="pt")
    torch.testing.assert_close(inputs["input_ids"][:, 0], plain["input_ids"])
    with torch.no_grad():
        features = model.get_text_features(**inputs)
        direct = model.text_projection(model.text_model(**plain).pooler_output)
    torch.testing.assert_close(features.pooler_output, direct)


def test_table2_checkpoints_reload(tmp_path):
    for row in ("flair", "flair-cast-hier"):
        model, inputs = tiny_fcast(row=row).eval(), training_inputs(row=row)
        model.save_pretrained(tmp_path / row)
        reloaded = FCASTModel.from_pretrained(tmp_path / row).eval()
        assert reloaded.config.vision_backbone == TABLE2[row][0]
        assert type(reloaded.config.vision_config).__name__ == (
            "CLIPVisionConfig" if row == "flair" else "CASTVisionConfig")
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**inputs, return_loss=True).loss,
                                       model(**inputs, return_loss=True).loss)
            expected = fcast_task(model, row).compute_loss(model, inputs)
            for name, value in fcast_task(reloaded, row).compute_loss(reloaded, inputs).items():
                torch.testing.assert_close(value, expected[name])


def test_two_level_loss_matches_the_transcribed_equations():
    model = tiny_fcast().eval()
    inputs = training_inputs()
    terms = fcast_task(model).compute_loss(model, inputs)
    expected = transcribed_loss(model, inputs)
    assert set(terms) == {"part_loss", "whole_loss"}
    for name, value in expected.items():
        torch.testing.assert_close(terms[name], value.reshape(()), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sum(terms.values()), (expected["part_loss"] + expected["whole_loss"]).reshape(()))
    # the model's own loss is the whole level's sigmoid loss over the batch's long captions (Eq. 8)
    torch.testing.assert_close(model(**inputs, return_loss=True).loss, expected["whole_loss"].reshape(()),
                               atol=1e-5, rtol=1e-5)


def test_without_part_alignment_only_the_whole_term():
    model = tiny_fcast().eval()
    task = fcast_task(model, part_loss_weight=0.0)
    inputs = training_inputs()
    terms = task.compute_loss(model, inputs)
    assert set(terms) == {"whole_loss"}
    torch.testing.assert_close(terms["whole_loss"], transcribed_loss(model, inputs)["whole_loss"].reshape(()))
    sum(terms.values()).backward()  # the part level's parameters are frozen, every other one trains (as DDP requires)
    unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert unused == [] and frozen == {"part_logit_scale", "part_logit_bias", *(
        f"grounding_pool.{name}" for name, _ in model.grounding_pool.named_parameters())}


def test_task_options():
    model = tiny_fcast()
    assert not hasattr(model, "objective") and not hasattr(model.config, "part_loss_weight")
    assert fcast_task(model).options() == {"objective": "fcast", "part_loss_weight": 1.0,
                                           "nonpaper_detach_stage1_from_part_loss": False}
    assert all(p.requires_grad for p in model.parameters())  # F-CAST with L_part trains every parameter
    assert fcast_task(tiny_fcast(row="flair"), "flair").options() == {
        "objective": "flair", "part_loss_weight": 1.0, "nonpaper_detach_stage1_from_part_loss": False}


def test_flair_pairs_grow_as_b_times_b_plus_k():
    """Image i gets its K sub-captions, then sub-caption j mod K of every other image j, in order of j."""
    batch, k = 5, 3
    all_sub = torch.arange(batch * k, dtype=torch.float)[:, None].expand(-1, 2).reshape(batch, k, 2)
    queries = part_level_queries(all_sub[2:4], all_sub, offset=2)  # this process holds images 2 and 3
    assert queries.shape == (2, k + batch - 1, 2)
    ids = queries[..., 0].long().tolist()
    assert ids[0] == [6, 7, 8] + [0, 4, 9, 13]  # image 2: own 6..8; images 0, 1, 3, 4 give k = 0, 1, 0, 1
    assert ids[1] == [9, 10, 11] + [0, 4, 8, 13]  # image 3: own 9..11; images 0, 1, 2, 4 give k = 0, 1, 2, 1


def test_initial_temperatures_and_biases_follow_section_4_1():
    model = tiny_fcast()
    for scale, bias in ((model.logit_scale, model.logit_bias), (model.part_logit_scale, model.part_logit_bias)):
        assert scale.shape == bias.shape == (1,)
        torch.testing.assert_close(scale.exp(), torch.tensor([1 / 0.07]))
        torch.testing.assert_close(bias, torch.tensor([-10.0]))
    assert model.logit_scale is not model.part_logit_scale  # separate learnable parameters per level


def test_text_encoder_packs_chunks_and_stage2_reads_the_first_n():
    model = tiny_fcast().eval()
    inputs = training_inputs(k=6)
    with torch.no_grad():
        full = model.get_text_features(inputs["input_ids"], inputs["attention_mask"])
        first_n = model.get_text_features(inputs["input_ids"][:, :4], inputs["attention_mask"][:, :4])
        one = model.text_model(input_ids=inputs["input_ids"][2, 5][None],
                               attention_mask=inputs["attention_mask"][2, 5][None])
    torch.testing.assert_close(full.pooler_output, first_n.pooler_output)  # extra sub-captions: part level only
    assert full.sub_caption_embeds.shape == (4, 6, 16)
    # stage 1 encodes every chunk independently: chunk (2, 5) alone gives the same embedding
    torch.testing.assert_close(full.sub_caption_embeds[2, 5], model.text_projection(one.pooler_output)[0],
                               atol=1e-5, rtol=1e-5)
    # the long caption depends on the order of its chunks (stage 2 has positions)
    swapped = inputs["input_ids"][:, [1, 0, 2, 3]]
    with torch.no_grad():
        other = model.get_text_features(swapped, inputs["attention_mask"][:, [1, 0, 2, 3]]).pooler_output
    assert not torch.allclose(other, full.pooler_output)


def test_grounding_attention_over_segments_and_pixels():
    model = tiny_fcast().eval()
    inputs = training_inputs()
    grounding = model.get_grounding(inputs["pixel_values"], inputs["superpixels"], inputs["input_ids"][:, :3],
                                    inputs["attention_mask"][:, :3])
    assert grounding.segment_attention.shape == (4, 3, 6) and grounding.pixel_attention.shape == (4, 3, 32, 32)
    torch.testing.assert_close(grounding.segment_attention.sum(-1), torch.ones(4, 3))
    vision = model.get_image_features(inputs["pixel_values"], inputs["superpixels"])
    padded = vision.segment_masks[1] == 0
    assert (grounding.segment_attention.transpose(1, 2)[padded] == 0).all()
    # pixel density: each segment's attention shared among its superpixels in proportion to their membership in the
    # soft assignment A (196-level -> 64-level), then spread over each superpixel's area
    shares = vision.assignments[0] / vision.assignments[0].sum(1, keepdim=True)  # (4, 196, 6): columns sum to 1
    i, q, y, x = 1, 2, 5, 7
    label = inputs["superpixels"][i, y, x]
    area = (inputs["superpixels"][i] == label).sum()
    expected = shares[i, label] @ grounding.segment_attention[i, q] / area
    torch.testing.assert_close(grounding.pixel_attention[i, q, y, x], expected)
    on_superpixels = torch.stack([shares[b, inputs["superpixels"][b].unique()].sum(0)
                                  for b in range(4)])  # (4, 6): each segment's share on superpixels with pixels
    torch.testing.assert_close(grounding.pixel_attention.sum((-2, -1)),
                               (grounding.segment_attention * on_superpixels[:, None]).sum(-1))
    if (on_superpixels > 1 - 1e-6).all():  # every member has pixels: the map keeps the attention's whole mass
        torch.testing.assert_close(grounding.pixel_attention.sum((-2, -1)), torch.ones(4, 3))


def test_vit_grounding_reads_the_patches():
    model = tiny_fcast(row="flair").eval()
    inputs = training_inputs(row="flair")
    grounding = model.get_grounding(inputs["pixel_values"], None, inputs["input_ids"][:, :1])
    assert grounding.segment_attention.shape == (4, 1, 16)  # 32 px / 8 px patches: 4 x 4
    torch.testing.assert_close(grounding.pixel_attention.sum((-2, -1)), torch.ones(4, 1))
    # pixel (y, x) lies in patch (y // 8) * 4 + x // 8 and gets its attention over the patch's 64 pixels
    for y, x in ((0, 0), (9, 30), (31, 17)):
        torch.testing.assert_close(grounding.pixel_attention[:, 0, y, x],
                                   grounding.segment_attention[:, 0, (y // 8) * 4 + x // 8] / 64)


def test_bad_input_is_named():
    model = tiny_fcast()
    inputs = training_inputs()
    with pytest.raises(ValueError, match="K >= N .* K = 3 < N = 4"):
        fcast_task(model).compute_loss(
            model, {**inputs, "input_ids": inputs["input_ids"][:, :3],
                    "attention_mask": inputs["attention_mask"][:, :3]})
    with pytest.raises(ValueError, match="superpixels"):
        model(**{k: v for k, v in inputs.items() if k != "superpixels"})
    with pytest.raises(ValueError, match="exceed stage 1's context of 16 tokens"):
        model.get_text_features(torch.ones(1, 4, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="pool_heads"):
        tiny_config(pool_heads=3)
    with pytest.raises(ValueError, match="vision_backbone must be one of"):
        tiny_config(vision_backbone="resnet")
    with pytest.raises(ValueError, match="objective must be one of"):
        FCASTTask(model, None, objective="clip")
    with pytest.raises(ValueError, match="FLAIR's flat loss has no such weight"):
        fcast_task(tiny_fcast(row="flair"), "flair", part_loss_weight=0.0)
    with pytest.raises(ValueError, match="part_loss_weight must be >= 0"):
        fcast_task(model, part_loss_weight=-1.0)
    with pytest.raises(ValueError, match="needs a CLIPVisionConfig, got CASTVisionConfig"):
        tiny_config("fcast", vision_backbone="vit", vision_config=tiny_config().vision_config)
    with pytest.raises(ValueError, match="flat text encoder .* num_chunks must be 1, got 4"):
        FCASTTextConfig(num_stage2_layers=0, num_chunks=4)


def test_training_step_reaches_every_parameter():
    model = tiny_fcast().train()
    sum(fcast_task(model).compute_loss(model, training_inputs()).values()).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert missing == []


def test_lora_trains_adapters_and_merges_into_an_ordinary_checkpoint(tmp_path):
    from hf_longclip.training.lora import LoraArguments, apply_lora, merge_lora

    model, inputs = tiny_fcast().eval(), training_inputs()
    peft_model = apply_lora(model, LoraArguments(lora_r=4, lora_target_modules="q_proj,k_proj,v_proj"))
    trainable = [name for name, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    # both stages of the text encoder and CAST get adapters
    assert any("text_model" in n for n in trainable) and any("text_stage2" in n for n in trainable)
    assert any("vision_model" in n for n in trainable)
    sum(fcast_task(peft_model).compute_loss(peft_model, inputs).values()).backward()
    assert all(p.grad is not None for name, p in peft_model.named_parameters() if p.requires_grad)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.add_(0.1)  # a trained adapter
        expected = peft_model(**inputs).logits_per_image
    merged = merge_lora(peft_model)
    merged.save_pretrained(tmp_path)
    reloaded = FCASTModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits_per_image, expected, atol=1e-4, rtol=1e-4)


def test_model_card_renders_the_checkpoints_facts():
    from hf_longclip.recipes.fcast.card import CARD as FCAST_CARD
    from hf_longclip.training.hub import build_model_card

    template = FCAST_CARD.template
    for weight, phrase in ((1.0, "L = L_part + L_whole"), (0.0, "ablation without part-level alignment")):
        model = tiny_fcast()
        config = {**model.config.to_dict(), **fcast_task(model, part_loss_weight=weight).options()}  # as `publish`
        card = str(build_model_card(template, repo_id="org/fcast-tiny", info=FCAST_CARD, config=config,
                                    results={"r1_i2t": 40.0, "pointing_game": 55.5}))
        assert phrase in card and "16 -> 6 -> 3 segments" in card and "N = 4 chunks" in card
        assert "grounding: pointing game (%) | 55.5" in card and "| L_part weight | " + str(weight) in card


# --- 2-process DDP ------------------------------------------------------------------------------------------------

def per_rank_step(reference_path: str) -> None:
    """Run by each torchrun process (see __main__): half the batch each, texts gathered with gradient."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == WORLD_SIZE
    reference = torch.load(reference_path)
    task = fcast_task(tiny_fcast(seed=0, row=reference["row"]), reference["row"])
    model = accelerator.prepare(task.model)
    model.eval()  # CAST's stem has BatchNorm: eval mode keeps its statistics out of the per-process batch
    rank, n = accelerator.process_index, len(reference["inputs"]["input_ids"]) // WORLD_SIZE
    local = {k: v[rank * n : (rank + 1) * n] for k, v in reference["inputs"].items()}
    terms = task.compute_loss(model, local)
    assert terms.keys() == reference["terms"].keys()
    accelerator.backward(sum(terms.values()))  # DDP averages the gradients
    for name, value in terms.items():
        mean = accelerator.reduce(value.detach(), reduction="mean")
        torch.testing.assert_close(mean, reference["terms"][name], atol=1e-5, rtol=1e-5)
    trained = {name: p for name, p in accelerator.unwrap_model(model).named_parameters() if p.requires_grad}
    assert trained.keys() == reference["grads"].keys()
    for name, param in trained.items():
        torch.testing.assert_close(param.grad, reference["grads"][name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("row", ["fcast", "flair-cast-hier"])
def test_two_processes_equal_one_process_on_the_concatenated_batch(row, tmp_path):
    inputs = training_inputs(row=row)
    model = tiny_fcast(seed=0, row=row).eval()
    terms = fcast_task(model, row).compute_loss(model, inputs)
    sum(terms.values()).backward()
    path = tmp_path / "reference.pt"
    torch.save({"row": row, "inputs": inputs, "terms": {k: v.detach() for k, v in terms.items()},
                "grads": {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}}, path)
    torchrun(__file__, str(path))


if __name__ == "__main__":
    per_rank_step(*sys.argv[1:])
