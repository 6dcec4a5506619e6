"""The text and image towers of every model as ONNX graphs, run with ONNX Runtime (`export_onnx`).

Each tower is one graph whose inputs are what the model's processor returns and whose output is the model's own
embedding (`pooler_output` of `get_text_features` / `get_image_features`: projected, not normalised; for
`CASTVisionModel`, its pooled output). The batch and the text length are dynamic (for F-CAST also the number of
chunks); CAST's and F-CAST's superpixel maps are a graph input: the processor computes them outside the graph.

    paths = export_onnx(model, processor, "onnx/")
    session = onnxruntime.InferenceSession(paths["text"])
    inputs = processor(text=captions, return_tensors="np")
    embeds = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})[0]

The graphs come from torch's exporter (`torch.onnx.export(dynamo=True)`, which needs `onnxscript`). Each graph keeps
its weights in a file beside it, `<tower>.onnx.data`, which ONNX Runtime reads by name: keep the two together. The
processor is saved in the same directory (`AutoProcessor.from_pretrained(directory, trust_remote_code=True)` reloads
it). The exporter's notices that concern no part of these models (torchvision operators it skips when torchvision is
not installed, a deprecation inside torch) are silenced while it runs.
"""

import contextlib
import inspect
import logging
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedModel, ProcessorMixin

EXAMPLE_TEXTS = ("a red circle. a blue square.", "a cat.")
TOWERS = {"text": ("get_text_features", "text_embeds"), "image": ("get_image_features", "image_embeds")}


class _Tower(torch.nn.Module):
    """One of the model's feature methods with positional tensor inputs, returning `pooler_output`."""

    def __init__(self, model: PreTrainedModel, method: str, input_names: list[str]):
        super().__init__()
        self.model, self.method, self.input_names = model, method, input_names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return getattr(self.model, self.method)(**dict(zip(self.input_names, tensors, strict=True))).pooler_output


def _method(model: PreTrainedModel, tower: str) -> str | None:
    method = TOWERS[tower][0]
    if callable(getattr(model, method, None)):
        return method
    if tower == "image" and "pixel_values" in inspect.signature(model.forward).parameters:
        return "forward"  # a vision model alone (CASTVisionModel)
    return None


def _example_inputs(processor: ProcessorMixin, tower: str) -> dict[str, torch.Tensor]:
    """A batch of two for the exporter to trace; texts of different lengths, padded to the longest."""
    if tower == "text":
        return dict(processor(text=list(EXAMPLE_TEXTS), padding="longest", return_tensors="pt"))
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)) for _ in range(2)]
    image_processor = getattr(processor, "image_processor", processor)
    return dict(image_processor(images, return_tensors="pt"))


def _dynamic_shapes(inputs: dict[str, torch.Tensor], tower: str) -> tuple:
    """Batch dynamic everywhere; for texts every axis after the batch too (tokens; F-CAST's chunks). One entry, the
    tuple of `_Tower.forward`'s `*tensors`."""
    axes = {name: {0: torch.export.Dim.DYNAMIC} for name in inputs}
    if tower == "text":
        for name, tensor in inputs.items():
            axes[name].update({axis: torch.export.Dim.DYNAMIC for axis in range(1, tensor.dim())})
    return (tuple(axes.values()),)


@contextlib.contextmanager
def _quiet_exporter():
    """Silence what torch's exporter says about no part of our graphs: that torchvision's detection operators (nms,
    roi_align, ...) are skipped when torchvision is absent, and torch's own `LeafSpec` deprecation."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
            yield
    finally:
        registration.setLevel(level)


def export_onnx(model: PreTrainedModel, processor: ProcessorMixin, directory: str | Path) -> dict[str, Path]:
    """Export `model`'s towers to `directory`/text.onnx and `directory`/image.onnx (those it has), each with its
    weights in `<tower>.onnx.data`, and save `processor` beside them; returns {"text": path, "image": path}. The
    graphs' input names are the processor's output keys the method takes (input_ids, attention_mask; pixel_values,
    superpixels), their outputs `text_embeds` / `image_embeds`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    paths = {}
    for tower, (_, output_name) in TOWERS.items():
        method = _method(model, tower)
        if method is None:
            continue
        accepted = inspect.signature(getattr(model, method)).parameters
        inputs = {k: v for k, v in _example_inputs(processor, tower).items() if k in accepted}
        path = directory / f"{tower}.onnx"
        with _quiet_exporter():
            torch.onnx.export(
                _Tower(model, method, list(inputs)).eval(), tuple(inputs.values()), str(path), dynamo=True,
                input_names=list(inputs), output_names=[output_name], dynamic_shapes=_dynamic_shapes(inputs, tower),
                verbose=False,
            )
        paths[tower] = path
    if not paths:
        raise TypeError(f"{type(model).__name__} has neither get_text_features nor an image tower to export")
    processor.save_pretrained(directory)
    return paths


__all__ = ["export_onnx"]
