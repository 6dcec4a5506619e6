"""Checkpoints load with AutoModel/AutoProcessor(trust_remote_code=True) where hf_longclip is not importable,
offline; `modeling/` is exactly the code save_pretrained writes."""

import filecmp
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.builders import CAPTIONS, tiny_himo, tiny_processor
from helpers.fresh_process import load_in_fresh_process, save_checkpoint
from hf_longclip import HiMoCLIPProcessor
from hf_longclip.cli import main as cli_main
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.export import model_bundle

REPO = Path(__file__).resolve().parents[2]

FRESH_PROCESS_PIPELINE = """
import sys
sys.modules["hf_longclip"] = None
import torch
from PIL import Image
from transformers import pipeline
checkpoint, labels, output = sys.argv[1], sys.argv[2].split("|"), sys.argv[3]
classify = pipeline("zero-shot-image-classification", model=checkpoint, trust_remote_code=True)
result = classify(Image.open(f"{checkpoint}/image0.png"), candidate_labels=labels, hypothesis_template="{}")
torch.save({item["label"]: item["score"] for item in result}, output)
"""


def test_checkpoint_with_clip_tokenizer_loads_without_the_library(tmp_path):
    expected = save_checkpoint(tiny_himo(), tiny_processor(), CAPTIONS, tmp_path / "ckpt")
    loaded = load_in_fresh_process(tmp_path / "ckpt", CAPTIONS, tmp_path)
    assert all(module.startswith("transformers_modules.") for module in loaded["classes"])
    resaved = tmp_path / "fresh.pt.resaved"
    for name in model_bundle("himo_clip"):
        assert filecmp.cmp(resaved / name, REPO / "modeling" / name, shallow=False), name
    torch.testing.assert_close(loaded["input_ids"], expected["input_ids"])
    for key in ("text", "image", "loss"):
        torch.testing.assert_close(loaded[key], expected[key], atol=1e-6, rtol=1e-6)


def test_zero_shot_pipeline_by_path_without_the_library(tmp_path):
    model, processor = tiny_himo(), tiny_processor()
    save_checkpoint(model, processor, CAPTIONS, tmp_path / "ckpt")
    scores = load_in_fresh_process(tmp_path / "ckpt", CAPTIONS, tmp_path, FRESH_PROCESS_PIPELINE)
    from PIL import Image

    inputs = processor(text=CAPTIONS, images=[Image.open(tmp_path / "ckpt" / "image0.png")])
    with torch.no_grad():
        expected = model(**inputs).logits_per_image.softmax(dim=-1)[0]
    for caption, probability in zip(CAPTIONS, expected.tolist()):
        assert abs(scores[caption] - probability) < 1e-5


def test_checkpoint_with_scene_tokenizer_loads_without_the_library(tmp_path):
    tokenizer = train_scene_tokenizer(CAPTIONS)
    processor = HiMoCLIPProcessor(image_processor=tiny_processor().image_processor, tokenizer=tokenizer)
    config = dict(bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = tiny_himo()
    model.config.text_config.update(config)  # ids of the trained tokenizer; vocab fits the tiny model
    assert len(tokenizer) <= model.config.text_config.vocab_size
    model.text_model.eos_token_id = tokenizer.eos_token_id
    expected = save_checkpoint(model, processor, CAPTIONS, tmp_path / "ckpt")
    loaded = load_in_fresh_process(tmp_path / "ckpt", CAPTIONS, tmp_path)
    torch.testing.assert_close(loaded["input_ids"], expected["input_ids"])
    torch.testing.assert_close(loaded["text"], expected["text"], atol=1e-6, rtol=1e-6)


def test_modeling_bundle_is_what_save_pretrained_writes(tmp_path):
    tiny_himo().save_pretrained(tmp_path)
    tiny_processor().save_pretrained(tmp_path)
    written = sorted(p.name for p in tmp_path.glob("*.py"))
    assert written == sorted(model_bundle("himo_clip"))
    for name in written:
        assert filecmp.cmp(tmp_path / name, REPO / "modeling" / name, shallow=False), (
            f"modeling/{name} is stale: run `hf-longclip export-code`"
        )
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == {"AutoConfig": "configuration_himo_clip.HiMoCLIPConfig",
                        "AutoModel": "modeling_himo_clip.HiMoCLIPModel",
                        "AutoModelForZeroShotImageClassification": "modeling_himo_clip.HiMoCLIPModel"}


def test_export_code_regenerates_the_bundle(tmp_path):
    cli_main(["export-code", "--output", str(tmp_path / "modeling"), "--cards-output", str(tmp_path / "cards")])
    comparison = filecmp.dircmp(tmp_path / "modeling", REPO / "modeling", ignore=["__pycache__"])
    assert not (comparison.diff_files or comparison.left_only or comparison.right_only)


def test_modeling_holds_each_file_once_and_names_each_models_files():
    """`modeling/` is one flat folder: no file twice under two names or in two folders, and its README lists the files
    each model's checkpoints carry (what `save_pretrained` writes)."""
    from hf_longclip.models import MODEL_FOLDERS

    files = sorted((REPO / "modeling").iterdir())
    assert not [path for path in files if path.is_dir()]
    texts = [path.read_text() for path in files if path.suffix == ".py"]
    assert len(set(texts)) == len(texts)
    readme = (REPO / "modeling" / "README.md").read_text()
    for arch in MODEL_FOLDERS:
        row = next(line for line in readme.splitlines() if line.startswith(f"| {arch} |"))
        assert re.findall(r"`([^`]+)`", row) == sorted(model_bundle(arch)), arch


def test_bundle_files_are_generated_and_import_no_library_module():
    bundle = model_bundle("himo_clip")
    assert {"configuration.py", "positions.py", "dual_encoder.py", "clip_dual_encoder.py", "saving.py"} <= set(bundle)
    # the model holds no objective: the remote code ships no loss, gather, exporter, task or card module
    assert not {"losses.py", "molo.py", "objective.py", "code_bundle.py", "task.py", "card.py"} & set(bundle)
    for name, text in bundle.items():
        assert text.startswith("# Generated by `hf-longclip export-code` from hf_longclip/"), name
        assert not re.search(r"^\s*(from|import)\s+hf_longclip", text, flags=re.MULTILINE), name
    assert "from .clip_dual_encoder import CLIPDualEncoder" in bundle["modeling_himo_clip.py"]
    assert "from .configuration import RefusesPlainCLIPMixin" in bundle["configuration_himo_clip.py"]


def test_export_code_check_fails_on_a_stale_bundle(tmp_path):
    check = [sys.executable, "-m", "hf_longclip.cli", "export-code", "--check"]
    assert subprocess.run(check, cwd=REPO, capture_output=True).returncode == 0  # the committed bundles are fresh
    cli_main(["export-code", "--output", str(tmp_path), "--cards-output", str(tmp_path / "cards")])
    stale = tmp_path / "dual_encoder.py"
    stale.write_text(stale.read_text() + "\n# edited by hand\n")
    (tmp_path / "leftover.py").write_text("")
    result = subprocess.run([*check, "--output", str(tmp_path), "--cards-output", str(tmp_path / "cards")],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "stale: " + str(stale) in result.stdout and "leftover.py" in result.stdout


def test_model_cards_are_the_model_folders_templates(tmp_path):
    """model_cards/<arch>.md at the top level is each recipe folder's card template under a generated header (a Jinja
    comment, so both render the same card); `export-code --check` names a changed, a missing and a left-over card."""
    import jinja2

    from hf_longclip.models import MODEL_FOLDERS

    cards = sorted(p.name for p in (REPO / "model_cards").glob("*.md"))
    assert cards == sorted(f"{arch}.md" for arch in MODEL_FOLDERS)
    for arch in MODEL_FOLDERS:
        card = (REPO / "model_cards" / f"{arch}.md").read_text()
        template = (REPO / "src" / "hf_longclip" / "recipes" / arch / "model_card.md").read_text()
        header, body = card.split("\n", 1)
        assert header.startswith("{#- Generated by `hf-longclip export-code` "
                                 f"from hf_longclip/recipes/{arch}/model_card.md")
        assert body == template
        assert jinja2.Template(header + "\n---").render() == "---"  # the header renders to nothing
    check = [sys.executable, "-m", "hf_longclip.cli", "export-code", "--check"]
    cli_main(["export-code", "--output", str(tmp_path / "modeling"), "--cards-output", str(tmp_path / "cards")])
    (tmp_path / "cards" / "cast.md").write_text("edited by hand\n")
    (tmp_path / "cards" / "ditm.md").unlink()
    (tmp_path / "cards" / "leftover.md").write_text("")
    result = subprocess.run([*check, "--output", str(tmp_path / "modeling"), "--cards-output", str(tmp_path / "cards")],
                            capture_output=True, text=True)
    assert result.returncode != 0
    for name in ("cast.md", "ditm.md", "leftover.md"):
        assert f"stale: {tmp_path / 'cards' / name}" in result.stdout, name


def test_save_pretrained_refuses_to_push_before_writing_the_bundle(tmp_path):
    with pytest.raises(ValueError, match="push_to_hub"):
        tiny_himo().save_pretrained(tmp_path, push_to_hub=True)


def test_every_model_folder_has_a_tiny_model_for_the_client_tests():
    """The ONNX, sentence-transformers and padding tests run every folder's tiny model: a new folder brings one."""
    from helpers.tiny_models import TINY_MODELS
    from hf_longclip.models import MODEL_FOLDERS

    assert set(TINY_MODELS) == set(MODEL_FOLDERS)


def test_every_model_folder_registers_its_auto_classes():
    """`hf_longclip.models.MODEL_FOLDERS` is the one list of models: importing hf_longclip registers each folder's
    `AUTO_CLASSES` with transformers' Auto classes, and marks each class for `save_pretrained`'s auto_map."""
    import importlib

    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING

    from hf_longclip.models import MODEL_FOLDERS

    assert set(MODEL_FOLDERS) == {"himo_clip", "ditm", "onelip", "cast", "fcast"}  # every folder, found
    for folder in MODEL_FOLDERS:
        classes = importlib.import_module(f"hf_longclip.models.{folder}").AUTO_CLASSES
        config_class = classes["AutoConfig"]
        assert type(transformers.AutoConfig.for_model(config_class.model_type)) is config_class, folder
        assert config_class._auto_class == "AutoConfig", folder
        assert "AutoModel" in classes, folder
        for auto_name, cls in classes.items():
            if auto_name == "AutoProcessor":
                assert PROCESSOR_MAPPING[config_class] is cls, folder
            elif auto_name == "AutoImageProcessor":
                assert IMAGE_PROCESSOR_MAPPING[config_class]["pil"] is cls, folder
            elif auto_name != "AutoConfig":
                assert getattr(transformers, auto_name)._model_mapping[config_class] is cls, (folder, auto_name)
        assert classes["AutoModel"]._auto_class == "AutoModel", folder
