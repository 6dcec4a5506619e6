"""HiMo-CLIP and Long-CLIP as a plain transformers `CLIPModel` + `CLIPProcessor` (`hf-longclip export-clip`,
`hf-longclip convert ... --as-clip`): the folder loads with no remote code in a process without the library, with the
model's features within 1e-6; `from_pretrained` of a CLIP folder into our classes names `from_clip`."""

import json

import pytest
import torch

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from helpers.fresh_process import fresh_process
from hf_longclip import DITMModel, HiMoCLIPModel, OneLIPModel
from hf_longclip.cli import main
from hf_longclip.models.himo_clip.export_clip import save_as_clip, to_clip_model

FRESH = """
import sys
sys.modules["hf_longclip"] = None
import json
import torch
from PIL import Image
from transformers import AutoModel, AutoProcessor
model = AutoModel.from_pretrained(sys.argv[1]).eval()  # no trust_remote_code
processor = AutoProcessor.from_pretrained(sys.argv[1])
captions = json.loads(sys.argv[2])
images = [Image.open(f"{sys.argv[1]}/image{i}.png") for i in range(len(captions))]
inputs = processor(text=captions, images=images, padding=True, truncation=True, return_tensors="pt")
with torch.no_grad():
    text = model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    image = model.get_image_features(pixel_values=inputs["pixel_values"])
print(json.dumps({"classes": [type(model).__name__, type(processor).__name__], "positions":
                  model.config.text_config.max_position_embeddings, "text": text.pooler_output.tolist(),
                  "image": image.pooler_output.tolist()}))
"""


def _stretched_himo() -> HiMoCLIPModel:
    """A tiny HiMo-CLIP from a 77-position CLIP, stretched to 248 as from_clip does (rows 0-19 frozen)."""
    clip = to_clip_model(tiny_himo(max_positions=77))
    return HiMoCLIPModel.from_clip(clip).eval()


def _check_plain_clip(folder, model, processor, tmp_path):
    assert not list(folder.glob("*.py")), "a plain CLIP folder ships no code"
    assert json.loads((folder / "config.json").read_text())["model_type"] == "clip"
    captions = [CAPTIONS[0] * 4, *CAPTIONS[1:]]  # one caption past 77 tokens
    for index, image in enumerate(random_images(len(captions))):
        image.save(folder / f"image{index}.png")
    result = fresh_process(FRESH, str(folder), json.dumps(captions), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["classes"] == ["CLIPModel", "CLIPProcessor"] and loaded["positions"] == 248
    from PIL import Image

    images = [Image.open(folder / f"image{i}.png") for i in range(len(captions))]
    inputs = processor(text=captions, images=images)
    assert inputs["input_ids"].shape[1] > 77
    with torch.no_grad():
        text = model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        image = model.get_image_features(pixel_values=inputs["pixel_values"])
    torch.testing.assert_close(torch.tensor(loaded["text"]), text.pooler_output, rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.tensor(loaded["image"]), image.pooler_output, rtol=0, atol=1e-6)


def test_export_clip_of_a_trained_checkpoint_loads_without_remote_code(tmp_path):
    model, processor = _stretched_himo(), tiny_processor()
    model.save_pretrained(tmp_path / "himo")
    processor.save_pretrained(tmp_path / "himo")
    main(["export-clip", str(tmp_path / "himo"), str(tmp_path / "clip")])
    _check_plain_clip(tmp_path / "clip", model, processor, tmp_path)


def test_convert_as_clip(tmp_path, monkeypatch):
    """The command's wiring (the converters themselves: tests/conversion/)."""
    import hf_longclip.models.conversion

    model, processor = _stretched_himo(), tiny_processor()
    monkeypatch.setattr(hf_longclip.models.conversion, "convert_checkpoint", lambda *args: (model, processor))
    main(["convert", "longclip", str(tmp_path / "released.pt"), str(tmp_path / "clip"), "--as-clip"])
    _check_plain_clip(tmp_path / "clip", model, processor, tmp_path)
    with pytest.raises(SystemExit):  # one kind of output at a time
        main(["convert", "longclip", "x.pt", "out", "--as-clip", "--text-encoder-only"])


def test_only_clip_inference_models_become_a_clip_model():
    from helpers.builders import tiny_sub_configs

    with pytest.raises(ValueError, match="HiMo-CLIP and Long-CLIP.*not DITMModel"):
        to_clip_model(DITMModel(DITMModel.config_class(**tiny_sub_configs(77))))


@pytest.mark.parametrize("model_class", [HiMoCLIPModel, OneLIPModel, DITMModel])
def test_from_pretrained_of_a_clip_folder_names_from_clip(tmp_path, model_class):
    save_as_clip(tiny_himo(), None, tmp_path)
    name = model_class.__name__
    with pytest.raises(ValueError, match=f"plain CLIP checkpoint.*not a {name}.*{name}.from_clip"):
        model_class.from_pretrained(tmp_path)
    assert type(model_class.from_clip(str(tmp_path))) is model_class  # what it says works
