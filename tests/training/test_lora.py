"""LoRA fine-tuning with peft: only adapters train, zero-init is exact, adapters round-trip, merged checkpoints
load with AutoModel(trust_remote_code=True) where hf_longclip is not importable."""

import json

import pytest
import torch
from peft import AutoPeftModel, PeftModel
from safetensors.torch import load_file
from transformers import HfArgumentParser

from helpers.builders import CAPTIONS, himo_task, random_images, tiny_himo, tiny_processor
from helpers.fresh_process import load_in_fresh_process, save_checkpoint
from hf_longclip import HiMoCLIPModel
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import train
from hf_longclip.training.lora import LoraArguments, apply_lora, count_parameters, merge_lora

POSITIONS = "text_model.embeddings.position_embedding"
# Merged weights W + s B A and the unmerged x W^T + s (x A^T) B^T differ by float32 rounding only (measured ~2e-7).
MERGE_TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def _outputs(model, inputs: dict) -> dict:
    with torch.no_grad():
        out = model(**inputs, return_loss=True)
        objective = sum(himo_task(model).compute_loss(model, inputs).values())  # what training minimises (MoLo)
        text = model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        image = model.get_image_features(pixel_values=inputs["pixel_values"])
    return {"loss": out.loss, "objective": objective, "text_embeds": out.text_embeds, "image_embeds": out.image_embeds,
            "logits": out.logits_per_image, "text_features": text.pooler_output, "image_features": image.pooler_output}


def _assert_outputs_equal(actual: dict, expected: dict, **tolerance) -> None:
    tolerance = tolerance or dict(atol=0, rtol=0)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], msg=lambda m: f"{key}: {m}", **tolerance)


def _perturb(model, seed: int = 1) -> None:
    """Stand-in for training: non-zero LoRA B matrices and changed modules_to_save copies."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                param.add_(0.1 * torch.randn(param.shape, generator=generator))


def _base_name(name: str) -> str:
    return name.replace(".base_layer", "").replace("base_model.model.", "", 1)


def test_only_lora_parameters_train_and_base_weights_stay_bit_identical(batch, accelerator, tmp_path):
    model = tiny_himo()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    expected_before = _outputs(model, batch)
    peft_model = apply_lora(model, LoraArguments(lora_r=4))
    trainable = [name for name, param in peft_model.named_parameters() if param.requires_grad]
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    # q, k, v, out of 2 layers in 2 towers: 16 Linear(32, 32), each with A (4 x 32) and B (32 x 4)
    assert count_parameters(peft_model) == (16 * 2 * 4 * 32, sum(t.numel() for t in before.values()) + 16 * 2 * 4 * 32)
    assert not peft_model.logit_scale.requires_grad

    processor = tiny_processor()
    rows = [{"image": image, "caption": caption} for image, caption in zip(random_images(len(CAPTIONS)), CAPTIONS)]
    args = LoopArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=len(rows),
                             learning_rate=1e-2, warmup_steps=0, logging_steps=1)
    prepared, history = train(himo_task(peft_model, ImageTextCollator(processor)), rows, args, accelerator)
    trained = accelerator.unwrap_model(prepared)
    assert trained is peft_model and [h["step"] for h in history] == [1, 2, 3]
    assert all(record["logit_scale"] == pytest.approx(peft_model.logit_scale.exp().item()) for record in history)
    trained.eval()

    after = _outputs(trained, batch)
    assert (after["text_embeds"] - expected_before["text_embeds"]).abs().max() > 1e-3
    assert (after["image_embeds"] - expected_before["image_embeds"]).abs().max() > 1e-3
    assert after["objective"] < expected_before["objective"]  # training batch == this batch
    assert after["loss"] < expected_before["loss"]
    base_state = {_base_name(name): tensor for name, tensor in trained.state_dict().items() if ".lora_" not in name}
    assert base_state.keys() == before.keys()
    for name, tensor in before.items():
        assert torch.equal(base_state[name], tensor), name
    with trained.disable_adapter():
        _assert_outputs_equal(_outputs(trained, batch), expected_before)


def test_zero_initialised_lora_gives_exactly_the_base_outputs(batch):
    expected = _outputs(tiny_himo(), batch)
    peft_model = apply_lora(tiny_himo(), LoraArguments(lora_r=8, lora_alpha=32, lora_dropout=0.1))
    peft_model.eval()
    _assert_outputs_equal(_outputs(peft_model, batch), expected)
    _perturb(peft_model)  # the adapters are in the computation: non-zero B changes the outputs
    assert not torch.allclose(_outputs(peft_model, batch)["text_embeds"], expected["text_embeds"])


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft 0.21 on transformers 5
def test_adapter_save_and_reload_on_a_fresh_base(batch, tmp_path):
    tiny_himo().save_pretrained(tmp_path / "base")
    base = HiMoCLIPModel.from_pretrained(tmp_path / "base").eval()
    base_outputs = _outputs(base, batch)
    peft_model = apply_lora(base, LoraArguments(lora_r=4, lora_modules_to_save=POSITIONS))
    _perturb(peft_model)
    expected = _outputs(peft_model, batch)
    assert not torch.allclose(expected["text_embeds"], base_outputs["text_embeds"])
    peft_model.save_pretrained(tmp_path / "adapter")

    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tmp_path / "base")
    assert config["r"] == 4 and sorted(config["target_modules"]) == ["k_proj", "out_proj", "q_proj", "v_proj"]
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert sum(".lora_A." in key or ".lora_B." in key for key in saved) == 32
    assert [key for key in saved if ".lora_" not in key] == [f"base_model.model.{POSITIONS}.weight"]

    reloaded = PeftModel.from_pretrained(HiMoCLIPModel.from_pretrained(tmp_path / "base").eval(), tmp_path / "adapter")
    _assert_outputs_equal(_outputs(reloaded, batch), expected)
    # base found from adapter_config.json; peft imports the base class only from allowlisted packages
    by_config = AutoPeftModel.from_pretrained(tmp_path / "adapter", import_allowlist=["hf_longclip"]).eval()
    assert type(by_config.get_base_model()) is HiMoCLIPModel
    _assert_outputs_equal(_outputs(by_config, batch), expected)


def test_merged_model_matches_the_adapter_and_loads_without_the_library(tmp_path):
    processor = tiny_processor()
    peft_model = apply_lora(tiny_himo(), LoraArguments(lora_r=4, lora_modules_to_save=POSITIONS))
    _perturb(peft_model)
    inputs = processor(text=CAPTIONS, images=random_images(len(CAPTIONS)))  # what save_checkpoint feeds
    unmerged = _outputs(peft_model, inputs)

    merged = merge_lora(peft_model)
    assert type(merged) is HiMoCLIPModel
    assert merged.state_dict().keys() == tiny_himo().state_dict().keys()
    _assert_outputs_equal(_outputs(merged, inputs), unmerged, **MERGE_TOLERANCE)
    assert not torch.allclose(_outputs(tiny_himo(), inputs)["text_embeds"], unmerged["text_embeds"])

    expected = save_checkpoint(merged, processor, CAPTIONS, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "adapter_config.json").exists()
    loaded = load_in_fresh_process(tmp_path / "ckpt", CAPTIONS, tmp_path)
    assert all(module.startswith("transformers_modules.") for module in loaded["classes"])
    for key in ("text", "image", "loss"):
        torch.testing.assert_close(loaded[key], expected[key], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loaded["text"], unmerged["text_embeds"], **MERGE_TOLERANCE)


def test_unknown_module_names_raise_a_clear_error():
    model = tiny_himo()
    with pytest.raises(ValueError, match=r"lora_target_modules.*\['qkv', 'mlp\.in'\]") as error:
        apply_lora(model, LoraArguments(lora_r=4, lora_target_modules="q_proj, qkv,mlp.in"))
    for linear in ("fc1", "fc2", "k_proj", "out_proj", "q_proj", "text_projection", "v_proj", "visual_projection"):
        assert f"'{linear}'" in str(error.value)
    with pytest.raises(ValueError, match=r"lora_modules_to_save.*\['position_embeddings'\]"):
        apply_lora(model, LoraArguments(lora_r=4, lora_modules_to_save="position_embeddings"))
    with pytest.raises(ValueError, match="lora_r"):
        apply_lora(model, LoraArguments(lora_r=0))
    assert all(".lora_" not in name for name, _ in model.named_parameters())  # failed calls left it untouched
    with pytest.raises(TypeError, match="PeftModel"):
        merge_lora(model)


def test_lora_arguments_parse_from_the_command_line():
    (args,) = HfArgumentParser(LoraArguments).parse_args_into_dataclasses(
        ["--lora_r", "8", "--lora_alpha", "4", "--lora_target_modules", "text_model.encoder.layers.1.mlp.fc1"]
    )
    assert (args.lora_r, args.lora_alpha, args.lora_dropout) == (8, 4.0, 0.0)
    peft_model = apply_lora(tiny_himo(), args)
    assert [name for name, p in peft_model.named_parameters() if p.requires_grad] == [
        "base_model.model.text_model.encoder.layers.1.mlp.fc1.lora_A.default.weight",
        "base_model.model.text_model.encoder.layers.1.mlp.fc1.lora_B.default.weight",
    ]
    assert peft_model.peft_config["default"].base_model_name_or_path is None  # built from a config: no path
    named = apply_lora(tiny_himo(), args, base_model_name_or_path="outputs/himo/base")
    assert named.peft_config["default"].base_model_name_or_path == "outputs/himo/base"
    with pytest.raises(ValueError, match="lora_r must be >= 0"):
        LoraArguments(lora_r=-1)
