"""Every model's towers exported with `export_onnx` run in ONNX Runtime within 1e-4 of PyTorch, on long texts and
images, at batch sizes and text lengths other than the traced ones; CAST's and F-CAST's superpixels are an input."""

import logging
import warnings

import pytest
import torch
from transformers import AutoProcessor

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from helpers.diffusion import LATE_CHANGE, PROMPT
from helpers.fcast import CAPTIONS as SCENE_CAPTIONS
from helpers.tiny_models import TEXT_MODELS, tiny_model
from hf_longclip.integrations.onnx import export_onnx
from hf_longclip.models import MODEL_FOLDERS

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

TOLERANCE = 1e-4


def captions(name: str) -> list[str] | None:
    """Texts for `name`'s text tower (None: it has none): long captions of 124, 123, 248 (truncated) and 50 tokens,
    F-CAST's scene captions for its scene-word tokenizer."""
    if name not in TEXT_MODELS:
        return None
    if name == "fcast":
        return SCENE_CAPTIONS + SCENE_CAPTIONS[:1]
    return [PROMPT, LATE_CHANGE, PROMPT * 2, CAPTIONS[0]]


def run(path, inputs) -> torch.Tensor:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {i.name: inputs[i.name].numpy() for i in session.get_inputs()})[0])


@pytest.mark.slow  # torch.export traces each tower: ~5-20 s a model on 2 free cores
@pytest.mark.parametrize("name", MODEL_FOLDERS)
def test_onnx_runtime_matches_pytorch(name, tmp_path):
    model, processor = tiny_model(name, seed=1)
    texts = captions(name)
    paths = export_onnx(model, processor, tmp_path)
    assert set(paths) == ({"image"} if texts is None else {"text", "image"})
    image_processor = getattr(processor, "image_processor", processor)
    for count in (1, 3):  # the graph was traced with 2
        images = image_processor(random_images(count, seed=count), return_tensors="pt")
        with torch.no_grad():
            expected = (model(**images).pooler_output if name == "cast" else
                        model.get_image_features(**images).pooler_output)
        got = run(paths["image"], images)
        assert got.shape == expected.shape and (got - expected).abs().max() < TOLERANCE
    image_inputs = {i.name for i in ort.InferenceSession(str(paths["image"])).get_inputs()}
    assert image_inputs == ({"pixel_values", "superpixels"} if name in ("cast", "fcast") else {"pixel_values"})
    if texts is None:
        return
    for batch, padding in ((texts, "longest"), (texts[:1], "max_length")):
        inputs = processor(text=batch, padding=padding, return_tensors="pt")
        with torch.no_grad():
            expected = model.get_text_features(**inputs).pooler_output
        got = run(paths["text"], inputs)
        assert got.shape == expected.shape and (got - expected).abs().max() < TOLERANCE
    if name != "fcast":
        assert inputs["input_ids"].shape[-1] == 248  # the model's length, beyond the traced texts' few tokens


def test_a_model_without_towers_is_refused(tmp_path):
    with pytest.raises(TypeError, match="neither get_text_features nor an image tower"):
        export_onnx(torch.nn.Linear(2, 2), tiny_processor(), tmp_path)


@pytest.mark.slow  # exports both towers
def test_the_cli_exports_a_saved_checkpoint(tmp_path, capsys):
    from hf_longclip.cli import main

    model, processor = tiny_himo(seed=1), tiny_processor()
    model.save_pretrained(tmp_path / "checkpoint")
    processor.save_pretrained(tmp_path / "checkpoint")
    exporter_log, notices = logging.getLogger("torch.onnx._internal.exporter._registration"), []
    handler = logging.Handler(logging.WARNING)
    handler.emit = notices.append
    exporter_log.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            main(["export-onnx", "--model", str(tmp_path / "checkpoint"), "--output-dir", str(tmp_path / "onnx")])
    finally:
        exporter_log.removeHandler(handler)
    out = capsys.readouterr().out
    assert "text.onnx (text tower, its weights in text.onnx.data)" in out and "wrote the processor" in out
    # no notice a user would have to ignore: torchvision operators skipped, torch's LeafSpec deprecation
    assert not notices and not [str(w.message) for w in caught if "LeafSpec" in str(w.message)]
    # every file docs/integrations.md names: the graphs, their weights and the processor beside them
    written = {path.name for path in (tmp_path / "onnx").iterdir()}
    assert {"text.onnx", "text.onnx.data", "image.onnx", "image.onnx.data", "processor_config.json",
            "tokenizer.json", "tokenizer_config.json"} <= written
    reloaded = AutoProcessor.from_pretrained(tmp_path / "onnx", trust_remote_code=True)
    inputs = reloaded(text=[PROMPT])
    assert torch.equal(inputs["input_ids"], processor(text=[PROMPT])["input_ids"])
    with torch.no_grad():
        expected = model.get_text_features(**inputs).pooler_output
    assert (run(tmp_path / "onnx" / "text.onnx", inputs) - expected).abs().max() < TOLERANCE
