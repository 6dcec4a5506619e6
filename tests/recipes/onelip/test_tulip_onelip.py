"""TULIP's two stages as the OneLIP miniature runs them (`hf_longclip.recipes.onelip.tulip`): the distillation loss of
stage 1 against a transcription of TULIP's released training step, what each stage trains, the NTK switch and the
text projection of stage 2, and examples/train_onelip.py's `tulip` variant under `accelerate launch`, killed in
either stage and resumed to the weights of an uninterrupted run."""

import json
import subprocess

import pytest
import torch
from torch.nn import MSELoss
from transformers import CLIPConfig, CLIPModel

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor
from helpers.launch import accelerate_launch, kill_when_written, run, script_env, weights
from hf_longclip import OneLIPModel
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.onelip.tulip import (
    DISTILLATION_LOSSES,
    TULIPDistillationTask,
    distillation_loss,
    distillation_student,
    finetuning_model,
)


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


def test_stage_two_scales_the_rope_and_takes_back_clips_text_projection():
    clip, student, _, _ = _stage_one()
    with torch.no_grad():
        student.text_projection.weight.mul_(2)  # what distillation moved
    model = finetuning_model(student, clip)
    assert all(param.requires_grad for param in model.parameters())
    assert torch.equal(model.text_projection.weight, clip.text_projection.weight)
    assert model.config.text_config.rope_ntk_scaling
    # the NTK-scaled frequencies of a OneLIP built for 248 tokens (Sec. 4.1), unlike stage 1's plain ones
    expected = OneLIPModel.from_clip(clip, max_length=248).text_model.rotary.inv_freq
    torch.testing.assert_close(model.text_model.rotary.inv_freq, expected, rtol=0, atol=0)
    assert not torch.equal(distillation_student(clip, 248).text_model.rotary.inv_freq, expected)


def test_bad_distillation_options_raise():
    with pytest.raises(ValueError, match="loss_type"):
        distillation_loss(torch.ones(2, 3), torch.ones(2, 3), "kl")
    with pytest.raises(ValueError, match="shape"):
        distillation_loss(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="loss_type"):
        TULIPDistillationTask(OneLIPModel.from_clip(tiny_clip()), None, teacher=tiny_clip(), loss_type="kl")


TINY = ["--num_train", "64", "--num_test", "24", "--image_size", "32", "--hidden_size", "32", "--num_layers", "1",
        "--num_heads", "2", "--logging_steps", "1", "--warmup_steps", "1", "--per_device_eval_batch_size", "32",
        "--base_steps", "2", "--variants", "tulip", "--max_steps", "8", "--tulip_distill_steps", "2",
        "--per_device_train_batch_size", "8", "--checkpointing_steps", "1"]


@pytest.mark.slow  # launches of examples/train_onelip.py
@pytest.mark.parametrize("killed_in", ["tulip-distill", "tulip"])
def test_tulip_variant_resumes_in_either_stage(killed_in, datasets_cache, tmp_path):
    """Stage 1 for 2 steps, stage 2 for the other 6 (enough that a run killed after stage 2's first checkpoint cannot
    finish first); a run killed after its first checkpoint of `killed_in` resumes to the histories and weights of an
    uninterrupted run."""
    uninterrupted, interrupted = tmp_path / "uninterrupted", tmp_path / "interrupted"
    env = script_env(datasets_cache)
    run(accelerate_launch("train_onelip.py", uninterrupted, ["--num_processes", "1"], *TINY), env, tmp_path)
    results = json.loads((uninterrupted / "results.json").read_text())
    assert {"tulip-distill", "tulip"} <= set(results["results"])
    assert [len(results["training"][stage]) for stage in ("tulip-distill", "tulip")] == [2, 6]
    assert "logit_scale" in results["training"]["tulip"][0]  # stage 2 is contrastive
    distilled = json.loads((uninterrupted / "tulip-distill" / "config.json").read_text())
    finetuned = json.loads((uninterrupted / "tulip" / "config.json").read_text())
    assert not distilled["text_config"]["rope_ntk_scaling"] and finetuned["text_config"]["rope_ntk_scaling"]

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
