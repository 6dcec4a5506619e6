"""OneLIP training through the shared loop: the frozen teacher stays bit-identical and out of the optimizer and the
checkpoint, the loss-weight schedule follows the task's step (saved for resume), LoRA, and remote code loading in a
fresh process without the library."""

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor
from helpers.fresh_process import FRESH_PROCESS_PRELUDE, load_in_fresh_process
from hf_longclip import OneLIPForPreTraining, OneLIPModel
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.onelip.task import OneLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import save_model, train
from hf_longclip.training.lora import LoraArguments, apply_lora, merge_lora

TERMS = {"coarse_loss", "token_loss", "contrastive_loss"}


def _rows() -> list[dict]:
    long_captions = [f"{caption} {CAPTIONS[(i + 1) % 4]} {CAPTIONS[(i + 2) % 4]}" for i, caption in enumerate(CAPTIONS)]
    return [{"image": image, "caption": caption} for image, caption in zip(random_images(4), long_captions)]


def _args(tmp_path, steps: int = 3) -> LoopArguments:
    return LoopArguments(output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-2,
                         warmup_steps=0, logging_steps=1)


def test_teacher_is_untouched_unoptimised_and_unsaved(accelerator, tmp_path):
    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip)
    task = OneLIPTask(model, ImageTextCollator(tiny_onelip_processor()), teacher=clip, trim_top_k=20)
    teacher_before = {k: v.clone() for k, v in task.teacher.state_dict().items()}
    student_before = {k: v.clone() for k, v in model.state_dict().items()}
    assert all(not p.requires_grad for p in task.teacher.parameters())
    assert not {id(p) for p in task.teacher.parameters()} & {id(p) for p in model.parameters()}

    prepared, history = train(task, _rows(), _args(tmp_path), accelerator)
    assert [h["step"] for h in history] == [1, 2, 3] and TERMS <= set(history[0])
    assert task.state_dict() == {"step": 3}
    for name, tensor in task.teacher.state_dict().items():
        assert torch.equal(tensor, teacher_before[name]), name
    assert all(p.grad is None for p in task.teacher.parameters())
    optimised = {id(p) for group in accelerator._optimizers[0].param_groups for p in group["params"]}
    assert not optimised & {id(p) for p in task.teacher.parameters()}
    trained = accelerator.unwrap_model(prepared).state_dict()
    for name in ("onelip.text_model.encoder.layers.0.self_attn.q_proj.weight", "trim_refine.queries"):
        assert not torch.equal(trained[name], student_before[name]), name
    for name, tensor in clip.text_model.state_dict().items():  # the caller's CLIP is not frozen nor changed
        assert torch.equal(tensor, teacher_before[name])

    path = save_model(accelerator, prepared, tmp_path / "model", tiny_onelip_processor())
    saved = load_file(path / "model.safetensors")
    assert set(saved) == set(model.state_dict())
    assert not any("teacher" in name for name in saved)
    reloaded = OneLIPForPreTraining.from_pretrained(path)
    for name, tensor in reloaded.state_dict().items():
        torch.testing.assert_close(tensor, trained[name], rtol=0, atol=0, msg=name)
    inference = OneLIPModel.from_pretrained(path)  # without TRIM-Refine's queries
    assert {f"onelip.{name}" for name in inference.state_dict()} == set(saved) - {"trim_refine.queries"}


def test_teacher_runs_in_the_dtype_of_the_models_weights():
    """With bf16 weights (DeepSpeed's bf16) the teacher is cast to bf16 before the step, outside the compiled region,
    and its token states are the bf16 teacher's."""
    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip).to(torch.bfloat16)
    task = OneLIPTask(model, ImageTextCollator(tiny_onelip_processor()), teacher=clip, trim_top_k=20)
    assert {p.dtype for p in task.teacher.parameters()} == {torch.float32}
    batch = task.prepare_step(model, task.collate_fn(_rows()))
    assert {p.dtype for p in task.teacher.parameters()} == {torch.bfloat16}
    encoded = task.encode(model, {**batch, "pixel_values": batch["pixel_values"].to(torch.bfloat16)})
    assert encoded["teacher_states"].dtype == torch.bfloat16
    assert clip.text_model.embeddings.token_embedding.weight.dtype == torch.float32  # the caller's CLIP is untouched


def test_loss_weights_follow_the_task_step_and_resume_with_it():
    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip).eval()
    task = OneLIPTask(model, ImageTextCollator(tiny_onelip_processor()), teacher=clip.text_model, weight_switch_step=2)
    batch = task.collate_fn(_rows())
    with torch.no_grad():
        first = task.compute_loss(model, batch)
        task.load_state_dict({"step": 2})  # what a resumed run restores
        later = task.compute_loss(model, batch)
    torch.testing.assert_close(later["coarse_loss"], first["coarse_loss"] * 0.05 / 0.2)
    torch.testing.assert_close(later["token_loss"], first["token_loss"] * 0.25 / 0.1)
    torch.testing.assert_close(later["contrastive_loss"], first["contrastive_loss"])
    assert all(value > 0 for value in first.values())


def test_lora_trains_adapters_only_and_merges(accelerator, tmp_path):
    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = apply_lora(model, LoraArguments(lora_r=4, lora_modules_to_save="trim_refine"))
    trainable = [name for name, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in name or "modules_to_save" in name for name in trainable)
    task = OneLIPTask(peft_model, ImageTextCollator(tiny_onelip_processor()), teacher=clip, trim_top_k=20)
    prepared, history = train(task, _rows(), _args(tmp_path, steps=2), accelerator)
    assert TERMS <= set(history[-1])
    trained = accelerator.unwrap_model(prepared)
    inputs = tiny_onelip_processor()(text=CAPTIONS, images=random_images(4))
    with torch.no_grad():
        adapted = trained.eval()(**inputs).text_embeds
        merged = merge_lora(trained)
        assert type(merged) is OneLIPForPreTraining and merged.state_dict().keys() == before.keys()
        torch.testing.assert_close(merged(**inputs).text_embeds, adapted, atol=1e-5, rtol=1e-5)
        original = OneLIPModel.from_clip(clip).eval()(**inputs).text_embeds  # the same weights, no queries
    assert (adapted - original).abs().max() > 1e-4
    assert not torch.equal(merged.trim_refine.queries, before["trim_refine.queries"])


FRESH_PROCESS_ONELIP = FRESH_PROCESS_PRELUDE + """
from transformers import pipeline
with torch.no_grad():
    out = model(**inputs)
    text = model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
classify = pipeline("zero-shot-image-classification", model=checkpoint, trust_remote_code=True)
scores = classify(images[0], candidate_labels=captions[1:], hypothesis_template="{}")  # short labels: the pipeline
# tokenizes them itself, without truncation
torch.save({"text": out.text_embeds, "image": out.image_embeds, "features": text.pooler_output,
            "classes": [type(model).__module__, type(processor).__module__], "input_ids": inputs["input_ids"],
            "scores": {item["label"]: item["score"] for item in scores}}, output)
"""


def test_checkpoint_loads_without_the_library(tmp_path):
    """Remote code, offline, hf_longclip absent, a non-default T_g (512): AutoModel, AutoProcessor, the zero-shot
    pipeline."""
    model, processor = OneLIPModel.from_clip(tiny_clip(), max_length=512).eval(), tiny_onelip_processor(512)
    model.save_pretrained(tmp_path / "ckpt")
    processor.save_pretrained(tmp_path / "ckpt")
    captions = [" ".join(CAPTIONS * 3), *CAPTIONS[1:]]
    images = random_images(len(captions))
    for i, image in enumerate(images):
        image.save(tmp_path / "ckpt" / f"image{i}.png")
    inputs = processor(text=captions, images=images)
    with torch.no_grad():
        expected = model(**inputs)
        probabilities = model(**processor(text=captions[1:], images=images[:1])).logits_per_image.softmax(-1)[0]
    loaded = load_in_fresh_process(tmp_path / "ckpt", captions, tmp_path, FRESH_PROCESS_ONELIP)
    assert all(module.startswith("transformers_modules.") for module in loaded["classes"])
    assert loaded["input_ids"].shape == (4, 512)
    torch.testing.assert_close(loaded["input_ids"], inputs["input_ids"])
    torch.testing.assert_close(loaded["text"], expected.text_embeds, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loaded["image"], expected.image_embeds, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(F.normalize(loaded["features"], dim=-1), expected.text_embeds, atol=1e-6, rtol=1e-6)
    for caption, probability in zip(captions[1:], probabilities.tolist()):
        assert abs(loaded["scores"][caption] - probability) < 1e-5
