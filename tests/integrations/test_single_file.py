"""The text encoder as one `.safetensors` file (`hf-longclip convert/export-clip --single-file`), read as
image-generation tools read a standalone CLIP text encoder: diffusers' own single-file CLIP loader (`diffusers.loaders.
single_file_utils.create_diffusers_clip_model_from_ldm`, under the key prefix of the checkpoints it reads) rebuilds a
`CLIPTextModelWithProjection` with the same outputs, and ComfyUI's Long-CLIP rule (transcribed below) takes it for a
long CLIP-L. The `--text-encoder-only` folder holds the names every transformers release loads (4.57 too:
scripts/compat_matrix.py loads it there)."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import CLIPTextModel, CLIPTextModelWithProjection

from helpers.builders import tiny_clip, tiny_himo, tiny_processor
from hf_longclip import OneLIPModel
from hf_longclip.cli import main
from hf_longclip.integrations.diffusion import save_single_file_text_encoder, save_text_encoder

single_file_utils = pytest.importorskip("diffusers.loaders.single_file_utils")


def comfyui_long_clip(state: dict) -> bool:
    """ComfyUI's test for a Long-CLIP text encoder file (comfyanonymous/ComfyUI, comfy/text_encoders/long_clipl.py,
    `model_options_long_clip`, commit 565d67478aead9865d517270aaaff0396d1ae788): the position table under
    `clip_l.text_model...` or `text_model.embeddings.position_embedding.weight` has 248 rows."""
    weight = state.get("clip_l.text_model.embeddings.position_embedding.weight", None)
    if weight is None:
        weight = state.get("text_model.embeddings.position_embedding.weight", None)
    return weight is not None and weight.shape[0] == 248


@pytest.fixture(scope="module")
def himo():
    return tiny_himo(seed=3)


def test_single_file_is_a_long_clip_text_encoder_that_diffusers_loads(himo, tmp_path):
    path = save_single_file_text_encoder(himo, tmp_path / "longclip_l.safetensors")
    state = load_file(path)
    assert all(key.startswith(("text_model.", "text_projection.")) for key in state)
    assert comfyui_long_clip(state)
    config_dir = tmp_path / "config"  # what diffusers reads the architecture from (the folder export's config)
    save_text_encoder(himo, None, config_dir)
    # SD 1.x single files keep the text encoder under this prefix (diffusers' CHECKPOINT_KEY_NAMES["clip"])
    checkpoint = {f"cond_stage_model.transformer.{key}": value for key, value in state.items()}
    assert single_file_utils.is_clip_model(checkpoint)
    loaded = single_file_utils.create_diffusers_clip_model_from_ldm(
        CLIPTextModelWithProjection, checkpoint, config=str(config_dir), local_files_only=True).eval()
    inputs = tiny_processor()(text=["a red circle in the top left. " * 12])
    with torch.no_grad():
        expected = himo.get_text_features(**inputs)
        actual = loaded(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert inputs["input_ids"].shape[1] > 77
    torch.testing.assert_close(actual.last_hidden_state, expected.last_hidden_state)
    torch.testing.assert_close(actual.text_embeds, expected.pooler_output)


def test_text_encoder_folder_has_the_names_every_release_loads(himo, tmp_path):
    save_text_encoder(himo, None, tmp_path)
    assert all(key.startswith("text_model.") for key in load_file(tmp_path / "model.safetensors"))
    loaded = CLIPTextModel.from_pretrained(tmp_path).eval()  # 5.6 and later map them onto their flat layout
    ids = tiny_processor()(text=["two green triangles."])["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).last_hidden_state,
                                   himo.get_text_features(input_ids=ids).last_hidden_state)


def test_export_clip_writes_the_single_file_and_other_models_are_refused(himo, tmp_path, capsys):
    checkpoint = tmp_path / "himo"
    himo.save_pretrained(checkpoint)
    tiny_processor().save_pretrained(checkpoint)
    single = tmp_path / "clip_l.safetensors"
    main(["export-clip", str(checkpoint), str(tmp_path / "clip"), "--single-file", str(single)])
    assert "(248 positions, width 32)" in capsys.readouterr().out
    assert comfyui_long_clip(load_file(single)) and (tmp_path / "clip" / "config.json").is_file()
    with pytest.raises(TypeError, match="not: write its text encoder folder"):
        save_single_file_text_encoder(OneLIPModel.from_clip(tiny_clip()), tmp_path / "onelip.safetensors")
    with pytest.raises(ValueError, match=".safetensors file"):
        save_single_file_text_encoder(himo, tmp_path / "clip_l.bin")


def test_convert_writes_the_text_encoder_folder_and_the_single_file(himo, tmp_path, monkeypatch, capsys):
    """The command's wiring (the converters themselves: tests/conversion/)."""
    import hf_longclip.models.conversion

    processor = tiny_processor()
    monkeypatch.setattr(hf_longclip.models.conversion, "convert_checkpoint", lambda *args: (himo, processor))
    single = tmp_path / "longclip_l.safetensors"
    main(["convert", "longclip", str(tmp_path / "released.pt"), str(tmp_path / "text"), "--text-encoder-only",
          "--single-file", str(single)])
    assert "as one file" in capsys.readouterr().out
    assert set(load_file(single)) == set(single_file_text_encoder_keys(himo))
    assert CLIPTextModel.from_pretrained(tmp_path / "text").config.max_position_embeddings == 248


def single_file_text_encoder_keys(model) -> set[str]:
    """transformers' `CLIPTextModelWithProjection` names of `model`'s text tower (4.57-5.5's and 5.6+'s alike)."""
    return {key for key in CLIPTextModelWithProjection(model.text_model.config).state_dict()
            if not key.endswith("position_ids")}
