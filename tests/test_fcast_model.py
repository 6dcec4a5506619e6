"""F-CAST's model and two-level loss: Eq. 7-8 against a direct transcription (loops over images, captions and
sub-captions), FLAIR's pair construction, Sec. 4.1's initial temperatures and biases, the hierarchical text encoder
(chunks packed into one batch, stage 2 over the first N), grounding maps, clear errors, and 2-process DDP equal to
one process on the concatenated batch."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from hf_longclip import CASTImageProcessor, FCASTConfig, FCASTModel, FCASTProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.objectives import part_level_queries

WORLD_SIZE = 2
CAPTIONS = [
    "A red circle is on the left. A blue square is at the top. The ground is plain. A green star is small.",
    "A yellow triangle is large. A red square is on the right. The sky is grey. A blue circle is tiny.",
    "A green circle is in the middle. A purple star is at the bottom. The scene is bright. A red star is big.",
    "A blue triangle is on the left. A yellow circle is at the top. The ground is dark. A green square is low.",
]


def tiny_processor() -> FCASTProcessor:
    tokenizer = train_scene_tokenizer(CAPTIONS, model_max_length=77)
    return FCASTProcessor(CASTImageProcessor(size=32, num_segments=16), tokenizer, max_length=16)


def tiny_config(**overrides) -> FCASTConfig:
    tokenizer = tiny_processor().tokenizer
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_attention_heads=4,
                num_hidden_layers=2, num_stage2_layers=1, max_position_embeddings=16,
                eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    vision = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32, num_segments=16,
                  depths=[1, 1, 1], num_clusters=[6, 3])
    return FCASTConfig(text_config=text, vision_config=vision, **{"projection_dim": 16, "pool_heads": 2, **overrides})


def tiny_fcast(seed: int = 0, **overrides) -> FCASTModel:
    torch.manual_seed(seed)
    return FCASTModel(tiny_config(**overrides))


def random_images(n: int) -> list[Image.Image]:
    return [Image.fromarray(np.random.default_rng(i).integers(0, 256, (40, 48, 3), dtype=np.uint8)) for i in range(n)]


def training_inputs(k: int = 6) -> dict:
    """4 images, each with K sub-captions: its caption's 4 balanced chunks, then sentences of the next caption."""
    processor = tiny_processor()
    subs = []
    for index, caption in enumerate(CAPTIONS):
        other = processor.chunk(CAPTIONS[(index + 1) % len(CAPTIONS)])
        subs.append(processor.chunk(caption) + other[: k - 4])
    return dict(processor(text=subs, images=random_images(len(CAPTIONS))))


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


def test_two_level_loss_matches_the_transcribed_equations():
    model = tiny_fcast().eval()
    inputs = training_inputs()
    out = model(**inputs, return_loss=True)
    expected = transcribed_loss(model, inputs)
    assert set(out.loss_terms) == {"part_loss", "whole_loss"}
    for name, value in expected.items():
        torch.testing.assert_close(out.loss_terms[name], value.reshape(()), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, (expected["part_loss"] + expected["whole_loss"]).reshape(()))


def test_without_part_alignment_only_the_whole_term():
    model = tiny_fcast(part_loss_weight=0.0).eval()
    inputs = training_inputs()
    out = model(**inputs, return_loss=True)
    assert set(out.loss_terms) == {"whole_loss"}
    torch.testing.assert_close(out.loss_terms["whole_loss"], transcribed_loss(model, inputs)["whole_loss"].reshape(()))
    out.loss.backward()  # the part level's parameters are frozen, every other one trains (as DDP requires)
    unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert unused == [] and frozen == {"part_logit_scale", "part_logit_bias", *(
        f"grounding_pool.{name}" for name, _ in model.grounding_pool.named_parameters())}


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
        one = model.text_model(input_ids=inputs["input_ids"][2, 5][None], attention_mask=inputs["attention_mask"][2, 5][None])
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
    # pixel map: attention carried through the soft assignment A (196-level -> 64-level), read at each superpixel
    i, q, y, x = 1, 2, 5, 7
    label = inputs["superpixels"][i, y, x]
    expected = vision.assignments[0][i, label] @ grounding.segment_attention[i, q]
    torch.testing.assert_close(grounding.pixel_attention[i, q, y, x], expected)


def test_bad_input_is_named():
    model = tiny_fcast()
    inputs = training_inputs()
    with pytest.raises(ValueError, match="K >= N .* K = 3 < N = 4"):
        model(**{**inputs, "input_ids": inputs["input_ids"][:, :3], "attention_mask": inputs["attention_mask"][:, :3]},
              return_loss=True)
    with pytest.raises(ValueError, match="superpixels"):
        model(**{k: v for k, v in inputs.items() if k != "superpixels"})
    with pytest.raises(ValueError, match="exceed stage 1's context of 16 tokens"):
        model.get_text_features(torch.ones(1, 4, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="pool_heads"):
        tiny_config(pool_heads=3)


def test_training_step_reaches_every_parameter():
    model = tiny_fcast().train()
    model(**training_inputs(), return_loss=True).loss.backward()
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
    peft_model(**inputs, return_loss=True).loss.backward()
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
    from hf_longclip.models.fcast import FCAST_CARD
    from hf_longclip.training.hub import build_model_card

    template = Path(__file__).resolve().parents[1] / "model_cards" / "fcast.md"
    for weight, phrase in ((1.0, "L = L_part + L_whole"), (0.0, "ablation without part-level alignment")):
        config = tiny_fcast(part_loss_weight=weight).config
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
    model = accelerator.prepare(tiny_fcast(seed=0))
    model.eval()  # CAST's stem has BatchNorm: eval mode keeps its statistics out of the per-process batch
    rank, n = accelerator.process_index, len(reference["inputs"]["input_ids"]) // WORLD_SIZE
    local = {k: v[rank * n : (rank + 1) * n] for k, v in reference["inputs"].items()}
    out = model(**local, return_loss=True)
    accelerator.backward(out.loss)  # DDP averages the gradients
    for name, value in out.loss_terms.items():
        mean = accelerator.reduce(value.detach(), reduction="mean")
        torch.testing.assert_close(mean, reference["terms"][name], atol=1e-5, rtol=1e-5)
    for name, param in accelerator.unwrap_model(model).named_parameters():
        torch.testing.assert_close(param.grad, reference["grads"][name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_two_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    inputs = training_inputs()
    model = tiny_fcast(seed=0).eval()
    out = model(**inputs, return_loss=True)
    out.loss.backward()
    path = tmp_path / "reference.pt"
    torch.save({"inputs": inputs, "terms": {k: v.detach() for k, v in out.loss_terms.items()},
                "grads": {name: p.grad.clone() for name, p in model.named_parameters()}}, path)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD_SIZE),
               "--master_port", str(29700 + os.getpid() % 1000), __file__, str(path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parent))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


if __name__ == "__main__":
    per_rank_step(*sys.argv[1:])
