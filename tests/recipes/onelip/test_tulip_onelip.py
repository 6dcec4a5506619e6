"""TULIP's two stages as the OneLIP miniature runs them (`hf_longclip.recipes.onelip.tulip`), against transcriptions of
TULIP's released code (ivonajdenkoska/tulip at commit 132c174f361ce7f8f2c1941e97a56ffc6f900bab): the stage-1 student
at step 0 and its distillation loss, what each stage trains, stage 2's frequencies, caption length and loss; and
examples/train_onelip.py's `tulip` variant under `accelerate launch`, killed in either stage and resumed to the weights
of an uninterrupted run."""

import copy
import json
import subprocess

import pytest
import torch
import torch.nn.functional as F
from torch.nn import MSELoss
from transformers import CLIPConfig, CLIPModel

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor, tiny_sub_configs
from helpers.launch import accelerate_launch, kill_when_written, run, script_env, weights
from hf_longclip import OneLIPModel
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.onelip.tulip import (
    DISTILLATION_LOSSES,
    TULIP_ADAM_EPSILON,
    TULIPDistillationTask,
    distillation_loss,
    distillation_student,
    finetuning_model,
    finetuning_stage,
)
from hf_longclip.training.optimizer import parameter_groups


def tulip_distillation_loss(teacher_out: torch.Tensor, student_out: torch.Tensor, loss_type: str) -> torch.Tensor:
    """Transcribed from ivonajdenkoska/tulip, open_clip/training/train_distill.py, `train_one_epoch` (the
    `accum_freq == 1` branch), commit 132c174f361ce7f8f2c1941e97a56ffc6f900bab; `teacher_out` is the teacher's
    `encode_text(texts)`, `student_out` the `TextTransformerRoPE` student's output on the same texts."""
    loss_mse = MSELoss(reduction='mean')
    if loss_type == 'mse':
        total_loss = loss_mse(teacher_out, student_out)
    elif loss_type == 'l2':
        total_loss = torch.norm(teacher_out - student_out, p=2, dim=1).mean()
    elif loss_type == 'cosine':
        tearcher_out_norm = teacher_out / torch.norm(teacher_out, p=2, dim=1, keepdim=True)
        student_out_norm = student_out / torch.norm(student_out, p=2, dim=1, keepdim=True)
        total_loss = 1 - (tearcher_out_norm * student_out_norm).sum(dim=1).mean()
    else:
        raise ValueError(f"Invalid loss type: {loss_type}")
    return total_loss


def _stage_one(loss_type: str = "cosine"):
    clip = tiny_clip()
    student = distillation_student(clip, max_length=248)
    with torch.no_grad():  # a student that has moved away from the teacher
        for param in student.text_model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    task = TULIPDistillationTask(student, ImageTextCollator(tiny_onelip_processor(77)), teacher=clip,
                                 loss_type=loss_type)
    long_captions = [" ".join([caption] * 8) for caption in CAPTIONS]  # cut at 77 tokens by the collator
    batch = task.collate_fn([{"image": image, "caption": caption}
                             for image, caption in zip(random_images(4), long_captions)])
    return clip, student, task, batch


@pytest.mark.parametrize("loss_type", DISTILLATION_LOSSES)
def test_distillation_loss_equals_tulips_release(loss_type):
    clip, student, task, batch = _stage_one(loss_type)
    assert batch["input_ids"].shape == (4, 77)
    terms = task.compute_loss(student, batch)
    with torch.no_grad():  # CLIP's encode_text: the projected end-of-text state; the student's own, projected
        teacher_out = clip.text_projection(clip.text_model(batch["input_ids"], batch["attention_mask"]).pooler_output)
        student_out = student.text_projection(
            student.text_model(batch["input_ids"], batch["attention_mask"]).pooler_output)
    expected = tulip_distillation_loss(teacher_out, student_out, loss_type)
    assert expected > 1e-3
    torch.testing.assert_close(terms["distillation_loss"], expected, atol=1e-6, rtol=0)


def test_stage_one_trains_the_text_side_only():
    clip, student, task, batch = _stage_one()
    task.compute_loss(student, batch)["distillation_loss"].backward()
    trained = {name for name, param in student.named_parameters() if param.grad is not None}
    assert trained and all(name.startswith(("text_model.", "text_projection.")) for name in trained)
    assert not any(param.requires_grad for param in student.vision_model.parameters())
    assert not student.logit_scale.requires_grad and not student.visual_projection.weight.requires_grad
    assert all(param.grad is None for param in task.teacher.parameters())
    assert not student.config.text_config.rope_ntk_scaling  # plain RoPE while distilling, as TULIP's student


def test_bad_distillation_options_raise():
    with pytest.raises(ValueError, match="loss_type"):
        distillation_loss(torch.ones(2, 3), torch.ones(2, 3), "kl")
    with pytest.raises(ValueError, match="shape"):
        distillation_loss(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="loss_type"):
        TULIPDistillationTask(OneLIPModel.from_clip(tiny_clip()), None, teacher=tiny_clip(), loss_type="kl")


# Transcribed from ivonajdenkoska/tulip, commit 132c174f361ce7f8f2c1941e97a56ffc6f900bab, open_clip/transformer_rope.py:
# `precompute_freqs_cis` (16-35), `precompute_freqs_cis_dynamic_ntk_scaling` (37-53), `apply_rotary_emb` (77-102) and
# the forward of `TextTransformerRoPE` (`TransformerRoPe`, `CustomResidualAttentionBlockRoPE`, `AttentionRoPE`) at the
# defaults main_distill_rope.py:249-254 builds it with (nn.GELU, no LayerScale, argmax pooling), its causal mask cut
# at the text's length (the release's 248 x 248 mask does not add to a 77-token text's scores). einops' rearranges are
# written as views and permutes.
def tulip_precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def tulip_precompute_freqs_cis_dynamic_ntk_scaling(dim: int, new_end: int, end: int, scaling_factor: float = 2.,
                                                   theta: float = 10000.0) -> torch.Tensor:
    theta = theta * ((scaling_factor * new_end / end) - (scaling_factor - 1)) ** (dim / (dim - 2))
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(new_end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def tulip_apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])  # reshape_for_broadcast
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def tulip_text_transformer_rope(state: dict, text: torch.Tensor, heads: int, layers: int) -> torch.Tensor:
    """`TextTransformerRoPE(text)` over open_clip-layout weights `state` (what main_distill_rope.py:256-259 copies
    from CLIP into the student): the projected text embedding at each text's end-of-text token (the largest id)."""
    width = state["token_embedding.weight"].shape[1]
    seq_len = text.shape[1]
    x = F.embedding(text, state["token_embedding.weight"])
    attn_mask = torch.empty(seq_len, seq_len).fill_(float("-inf")).triu_(1)
    freqs_cis = tulip_precompute_freqs_cis(width // heads, 500 * 2)[:seq_len]
    x = x.permute(1, 0, 2)  # NLD -> LND
    for i in range(layers):
        p = f"transformer.resblocks.{i}."
        h = F.layer_norm(x, (width,), state[p + "ln_1.weight"], state[p + "ln_1.bias"])
        L, N, C = h.shape
        q, k, v = F.linear(h, state[p + "attn.in_proj_weight"], state[p + "attn.in_proj_bias"]).chunk(3, dim=-1)
        q, k, v = (t.view(L, N, heads, C // heads).permute(1, 0, 2, 3) for t in (q, k, v))
        q, k = tulip_apply_rotary_emb(q, k, freqs_cis=freqs_cis)
        q, k, v = (t.permute(0, 2, 1, 3).reshape(N * heads, L, C // heads) for t in (q, k, v))
        attn = torch.bmm(q * (C // heads) ** -0.5, k.transpose(-1, -2)) + attn_mask
        out = torch.bmm(attn.softmax(dim=-1), v).transpose(0, 1).reshape(L, N, C)
        x = x + F.linear(out, state[p + "attn.out_proj.weight"], state[p + "attn.out_proj.bias"])
        h = F.layer_norm(x, (width,), state[p + "ln_2.weight"], state[p + "ln_2.bias"])
        h = F.gelu(F.linear(h, state[p + "mlp.c_fc.weight"], state[p + "mlp.c_fc.bias"]))
        x = x + F.linear(h, state[p + "mlp.c_proj.weight"], state[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x.permute(1, 0, 2), (width,), state["ln_final.weight"], state["ln_final.bias"])
    return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ state["text_projection"]


def open_clip_text_state(clip: CLIPModel) -> dict[str, torch.Tensor]:
    """The text weights of `clip` in open_clip's layout (the names TULIP's student loads)."""
    text, state = clip.text_model, {}
    state["token_embedding.weight"] = text.embeddings.token_embedding.weight
    for i, layer in enumerate(text.encoder.layers):
        p, attn = f"transformer.resblocks.{i}.", layer.self_attn
        state[p + "attn.in_proj_weight"] = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        state[p + "attn.in_proj_bias"] = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        for ours, theirs in (("self_attn.out_proj", "attn.out_proj"), ("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"),
                             ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")):
            module = layer.get_submodule(ours)
            state[p + theirs + ".weight"], state[p + theirs + ".bias"] = module.weight, module.bias
    state["ln_final.weight"], state["ln_final.bias"] = text.final_layer_norm.weight, text.final_layer_norm.bias
    state["text_projection"] = clip.text_projection.weight.T
    return {name: value.detach() for name, value in state.items()}


def test_initial_student_equals_tulips_student():
    """At step 0 the student TULIP builds from a CLIP (exact GELU, RoPE on CLIP's rows in consecutive pairs) and the
    library's give the same projected embedding of 77-token texts. A CLIP with random weights everywhere (biases and
    norms too) and OpenAI's convention that the end-of-text id is the largest (TULIP pools at the argmax)."""
    sub_configs = tiny_sub_configs(77)
    sub_configs["text_config"].update(bos_token_id=78, eos_token_id=79, pad_token_id=0)
    torch.manual_seed(0)
    clip = CLIPModel(CLIPConfig(**sub_configs)).eval()
    assert clip.config.text_config.hidden_act == "quick_gelu"
    with torch.no_grad():
        for param in clip.parameters():
            param.add_(0.1 * torch.randn_like(param))
    generator = torch.Generator().manual_seed(0)
    text = torch.zeros(3, 77, dtype=torch.long)
    for row, end in enumerate((76, 40, 9)):  # open_clip's tokens: start, words, end of text, zeros
        text[row, 0], text[row, 1:end] = 78, torch.randint(2, 78, (end - 1,), generator=generator)
        text[row, end] = 79
    expected = tulip_text_transformer_rope(open_clip_text_state(clip), text, heads=4, layers=2)
    student = distillation_student(clip)
    assert student.config.text_config.max_position_embeddings == 248
    with torch.no_grad():
        actual = student.get_text_features(input_ids=text, attention_mask=(text != 0).long()).pooler_output
    # parity with the release's computation: the same float32 operations in another order (complex rotation, fused
    # attention), 2 layers on unit-scale activations
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_stage_one_leaves_the_token_embedding_unchanged():
    """An AdamW step as the loop takes it (its parameter groups, weight decay 0.1) moves the student's text weights but
    not its token embedding, which TULIP keeps out of its optimizer (main_distill_rope.py:335, 341)."""
    clip, student, task, batch = _stage_one()
    embedding = student.text_model.get_input_embeddings().weight.detach().clone()
    query = student.text_model.encoder.layers[0].self_attn.q_proj.weight.detach().clone()
    optimizer = torch.optim.AdamW(parameter_groups(student, weight_decay=0.1), lr=1e-3, betas=(0.9, 0.98),
                                  eps=TULIP_ADAM_EPSILON)
    task.compute_loss(student, batch)["distillation_loss"].backward()
    optimizer.step()
    assert torch.equal(student.text_model.get_input_embeddings().weight, embedding)
    assert not torch.equal(student.text_model.encoder.layers[0].self_attn.q_proj.weight, query)


def tulip_clip_loss(image_features, text_features, logit_scale):
    """open_clip/loss.py `ClipLoss.forward` on one process (world_size 1), as TULIP's release has it."""
    logits_per_image = logit_scale * image_features @ text_features.T
    logits_per_text = logit_scale * text_features @ image_features.T
    labels = torch.arange(logits_per_image.shape[0], device=image_features.device, dtype=torch.long)
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2


def _stage_two():
    clip, student, _, _ = _stage_one()
    processor = tiny_onelip_processor()
    return clip, finetuning_stage(copy.deepcopy(student), clip, processor.tokenizer, processor.image_processor)


def test_stage_two_loss_equals_tulips_on_captions_of_several_sentences():
    """TULIP's train.py:289-301: ClipLoss of the images against the long captions plus ClipLoss against their first
    sentences, `caption.split(".")[0]` (data.py:100), every text tokenised and padded at the 600-token context
    length (main_context_finetune_rope.py:435); open_clip's CLIP normalises both features and exponentiates the
    scale."""
    _, (task, processor) = _stage_two()
    model = task.model
    captions = [f"{caption} {' '.join(CAPTIONS[:i])}" for i, caption in enumerate(CAPTIONS)]
    captions[2] = "a gray picture. it holds a yellow cross.in the center. nothing else"
    assert all(caption.count(".") >= 2 for caption in captions[1:])
    images = random_images(len(captions))
    batch = task.collate_fn([{"image": image, "caption": caption} for image, caption in zip(images, captions)])
    terms = task.compute_loss(model, batch)
    with torch.no_grad():
        pixels = processor(images=images)["pixel_values"]
        long = processor(text=captions, padding="max_length")
        short = processor(text=[str(caption).split(".")[0] for caption in captions], padding="max_length")
        assert long["input_ids"].shape[1] == short["input_ids"].shape[1] == 600
        image_features = F.normalize(model.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
        logit_scale = model.logit_scale.exp()
        total_loss = sum(
            tulip_clip_loss(image_features, F.normalize(model.get_text_features(**texts).pooler_output, dim=-1),
                            logit_scale)
            for texts in (long, short))
    assert set(terms) == {"contrastive_loss", "short_contrastive_loss"}
    # the same computation but for the padding (the causal encoder pools before it) and the order of the sum
    torch.testing.assert_close(sum(terms.values()), total_loss, atol=1e-5, rtol=0)


def test_a_600_token_caption_reaches_the_text_tower_whole():
    """Stage 2 tokenises captions at TULIP's extended context length, 600 (params.py:470-474: 3 x the release's
    DEFAULT_CONTEXT_LENGTH 200), and the text tower encodes every token of such a caption."""
    _, (task, processor) = _stage_two()
    text = " ".join(["a small red circle next to a large blue square."] * 20)
    caption = next(text[:end] for end in range(len(text)) if len(processor.tokenizer(text[:end])["input_ids"]) == 600)
    ids = processor.tokenizer(caption)["input_ids"]
    seen = []
    hook = task.model.text_model.embeddings.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    batch = task.collate_fn([{"image": image, "caption": text}
                             for image, text in zip(random_images(2), [caption, CAPTIONS[0]])])
    task.compute_loss(task.model, batch)
    hook.remove()
    assert seen[0][0].tolist() == ids  # the long captions' forward, the 600-token caption first


def test_stage_two_scales_the_rope_as_tulip_and_takes_back_clips_text_projection():
    clip, student, _, _ = _stage_one()
    with torch.no_grad():
        student.text_projection.weight.mul_(2)  # what distillation moved
    model = finetuning_model(student, clip)
    assert all(param.requires_grad for param in model.parameters())
    assert torch.equal(model.text_projection.weight, clip.text_projection.weight)
    assert model.config.text_config.rope_ntk_scaling
    assert model.config.text_config.max_position_embeddings == 600
    # main_context_finetune_rope.py:306-309: new_end 600 (--extended-context-length), end 248 (the student's
    # length), factor 8 (params.py:476-480); the angle of position 1 is each inverse frequency
    head_dim = clip.config.text_config.hidden_size // clip.config.text_config.num_attention_heads
    freqs_cis = tulip_precompute_freqs_cis_dynamic_ntk_scaling(head_dim, new_end=600, end=248, scaling_factor=8.)
    # the same formula evaluated by transformers' dynamic-NTK initialisation: float32 roundings of a power
    torch.testing.assert_close(model.text_model.rotary.inv_freq, freqs_cis[1].angle(), rtol=1e-6, atol=0)
    plain = tulip_precompute_freqs_cis(head_dim, 2)[1].angle()  # stage 1: plain RoPE
    torch.testing.assert_close(distillation_student(clip).text_model.rotary.inv_freq, plain, rtol=1e-6, atol=0)
    assert not torch.allclose(plain, freqs_cis[1].angle())


TINY = ["--num_train", "64", "--num_test", "24", "--image_size", "32", "--hidden_size", "32", "--num_layers", "1",
        "--num_heads", "2", "--logging_steps", "1", "--warmup_steps", "1", "--per_device_eval_batch_size", "32",
        "--base_steps", "2", "--variants", "tulip", "--max_steps", "8", "--tulip_distill_steps", "2",
        "--per_device_train_batch_size", "8", "--checkpointing_steps", "1"]


@pytest.fixture(scope="module")
def tulip_uninterrupted(datasets_cache, tmp_path_factory):
    """An uninterrupted run of the `tulip` variant (both stages): its directory and results.json."""
    uninterrupted = tmp_path_factory.mktemp("tulip") / "uninterrupted"
    run(accelerate_launch("train_onelip.py", uninterrupted, ["--num_processes", "1"], *TINY),
        script_env(datasets_cache), uninterrupted.parent)
    results = json.loads((uninterrupted / "results.json").read_text())
    assert {"tulip-distill", "tulip"} <= set(results["results"])
    assert [len(results["training"][stage]) for stage in ("tulip-distill", "tulip")] == [2, 6]
    assert "logit_scale" in results["training"]["tulip"][0]  # stage 2 is contrastive
    distilled = json.loads((uninterrupted / "tulip-distill" / "config.json").read_text())
    finetuned = json.loads((uninterrupted / "tulip" / "config.json").read_text())
    assert not distilled["text_config"]["rope_ntk_scaling"] and finetuned["text_config"]["rope_ntk_scaling"]
    return uninterrupted, results


@pytest.mark.slow  # launches of examples/train_onelip.py
@pytest.mark.parametrize("killed_in", ["tulip-distill", "tulip"])
def test_tulip_variant_resumes_in_either_stage(killed_in, tulip_uninterrupted, datasets_cache, tmp_path):
    """Stage 1 for 2 steps, stage 2 for the other 6 (enough that a run killed after stage 2's first checkpoint cannot
    finish first); a run killed after its first checkpoint of `killed_in` resumes to the histories and weights of an
    uninterrupted run."""
    uninterrupted, results = tulip_uninterrupted
    interrupted, env = tmp_path / "interrupted", script_env(datasets_cache)
    command = accelerate_launch("train_onelip.py", interrupted, ["--num_processes", "1"], *TINY)
    kill_when_written(command, interrupted / "checkpoints" / killed_in / "step_00000001", env, tmp_path)
    assert not (interrupted / "tulip").exists(), "the run finished before it was killed"
    run([*command, "--resume_from_checkpoint", "latest"], env, tmp_path)
    resumed = json.loads((interrupted / "results.json").read_text())
    for stage in ("tulip-distill", "tulip"):
        assert resumed["training"][stage] == pytest.approx(results["training"][stage], rel=1e-6), stage
        expected, actual = weights(uninterrupted / stage), weights(interrupted / stage)
        for name in expected:
            torch.testing.assert_close(actual[name], expected[name], atol=1e-6, rtol=0, msg=name)


def tulip_release_state(seed: int = 0, width: int = 64, embed: int = 32) -> dict[str, torch.Tensor]:
    """Random weights in the layout of TULIP's released checkpoints (open_clip's CLIP after stage 2, one block per
    tower, OpenAI's 49,408-token vocabulary), tiny: what `hf-longclip convert tulip` reads."""
    generator = torch.Generator().manual_seed(seed)

    def block(prefix):
        return {f"{prefix}ln_1.weight": torch.ones(width), f"{prefix}ln_1.bias": torch.zeros(width),
                f"{prefix}ln_2.weight": torch.ones(width), f"{prefix}ln_2.bias": torch.zeros(width),
                f"{prefix}attn.in_proj_weight": (3 * width, width), f"{prefix}attn.in_proj_bias": (3 * width,),
                f"{prefix}attn.out_proj.weight": (width, width), f"{prefix}attn.out_proj.bias": (width,),
                f"{prefix}mlp.c_fc.weight": (4 * width, width), f"{prefix}mlp.c_fc.bias": (4 * width,),
                f"{prefix}mlp.c_proj.weight": (width, 4 * width), f"{prefix}mlp.c_proj.bias": (width,)}

    layout = {"visual.conv1.weight": (width, 3, 16, 16), "visual.class_embedding": (width,),
              "visual.positional_embedding": (5, width), "visual.ln_pre.weight": torch.ones(width),
              "visual.ln_pre.bias": torch.zeros(width), **block("visual.transformer.resblocks.0."),
              "visual.ln_post.weight": torch.ones(width), "visual.ln_post.bias": torch.zeros(width),
              "visual.proj": (width, embed), "token_embedding.weight": (49408, width),
              "positional_embedding": (77, width), **block("transformer.resblocks.0."),
              "ln_final.weight": torch.ones(width), "ln_final.bias": torch.zeros(width),
              "text_projection": (width, embed), "logit_scale": torch.tensor(4.6052)}
    return {name: value if isinstance(value, torch.Tensor) else 0.05 * torch.randn(value, generator=generator)
            for name, value in layout.items()}


@pytest.mark.slow  # a launch of examples/train_onelip.py
def test_converted_tulip_weights_start_onelip_training(datasets_cache, tmp_path):
    """`hf-longclip convert tulip` output as `--base_checkpoint`: the OneLIP rows start from TULIP's weights (row
    `base` is the converted model as it is) with the CLIP of `--teacher_checkpoint` as teacher; the CLIP rows are
    refused by name."""
    from helpers.conversion import open_clip_bpe_file
    from hf_longclip.cli import main

    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in tulip_release_state().items()}},
               tmp_path / "epoch_1.pt")
    converted = tmp_path / "tulip-converted"
    main(["convert", "tulip", str(tmp_path / "epoch_1.pt"), str(converted), "--bpe-file", str(open_clip_bpe_file())])
    start = OneLIPModel.from_pretrained(converted)
    width = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=1, num_attention_heads=1)
    teacher = CLIPModel(CLIPConfig(text_config=dict(width, vocab_size=49408, bos_token_id=49406, eos_token_id=49407),
                                   vision_config=dict(width, image_size=32, patch_size=16), projection_dim=32))
    teacher.save_pretrained(tmp_path / "teacher")  # TULIP's CLIP (its width; random weights)
    common = ["--num_train", "64", "--num_test", "24", "--image_size", "32", "--logging_steps", "1",
              "--warmup_steps", "1", "--per_device_eval_batch_size", "32", "--max_steps", "2",
              "--per_device_train_batch_size", "8", "--trim_top_k", "40", "--base_checkpoint", str(converted),
              "--teacher_checkpoint", str(tmp_path / "teacher")]
    output = tmp_path / "out"
    run(accelerate_launch("train_onelip.py", output, ["--num_processes", "1"], *common, "--variants", "onelip"),
        script_env(datasets_cache), tmp_path)
    results = json.loads((output / "results.json").read_text())
    assert set(results["results"]) == {"base", "onelip"} and len(results["training"]["onelip"]) == 2
    trained = OneLIPModel.from_pretrained(output / "onelip")
    assert trained.config.text_config.max_position_embeddings == 248
    assert not trained.config.text_config.rope_ntk_scaling  # TULIP's converted setting, kept
    moved = {name: (trained.state_dict()[name] - tensor).abs().max().item()
             for name, tensor in start.state_dict().items()}
    assert 0 < moved["text_model.encoder.layers.0.self_attn.q_proj.weight"] < 0.05  # trained from TULIP's weights
    refused = subprocess.run(accelerate_launch("train_onelip.py", tmp_path / "refused", ["--num_processes", "1"],
                                               *common, "--variants", "clip-248"),
                             env=script_env(datasets_cache), cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode != 0 and "holds a OneLIP checkpoint" in refused.stderr
