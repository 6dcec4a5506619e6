"""The one list of methods: every `recipes/<arch>/` folder exports `METHODS`, a tuple of `Method`s (what the
method is: how its model and task are built at a size, the batch its collator makes, its variants, script, card
and evaluation), and `methods()` finds them by walking this package. The example scripts, `hf-longclip plan`,
`benchmarks/gpu_suite.py`, the CLI's choices and the tests read it; adding a method is one model folder and one
recipes folder (docs/contributing.md).

    from hf_longclip.recipes.registry import SIZES, BuildOptions, PlaceholderInputs, method

    spec = method("himo")
    model, task = spec.build(SIZES["tiny"], BuildOptions())
    batch = spec.example_batch(SIZES["tiny"], 4, PlaceholderInputs(SIZES["tiny"]), BuildOptions())
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch

LONG_LENGTH, SHORT_LENGTH = 248, 77  # Long-CLIP's text positions, CLIP's
BOS, EOS = 49406, 49407  # CLIP's start and end of text; its tokenizer pads with the end-of-text token


@dataclass(frozen=True)
class ModelSize:
    """A CLIP's tower sizes (transformers' names): vision (width, layers, heads, MLP width, image and patch size),
    text (width, layers, heads, MLP width), the shared projection, the vocabulary and the activation; `cast`: CAST's
    (depths, clusters) at this width, where CAST is defined."""

    vision_width: int
    vision_layers: int
    vision_heads: int
    vision_intermediate: int
    image_size: int
    patch_size: int
    text_width: int
    text_layers: int
    text_heads: int
    text_intermediate: int
    projection_dim: int
    vocab_size: int = 49408
    hidden_act: str = "quick_gelu"
    cast: tuple | None = None

    @property
    def eos_token_id(self) -> int:
        return EOS % self.vocab_size

    def text_config(self, positions: int, layers: int | None = None) -> dict:
        """A CLIP text tower's config at this size with `positions` positions (and `layers`, default all)."""
        return dict(hidden_size=self.text_width, intermediate_size=self.text_intermediate,
                    num_attention_heads=self.text_heads, num_hidden_layers=layers or self.text_layers,
                    vocab_size=self.vocab_size, max_position_embeddings=positions, hidden_act=self.hidden_act,
                    bos_token_id=BOS % self.vocab_size, eos_token_id=self.eos_token_id,
                    pad_token_id=self.eos_token_id)

    def vision_config(self) -> dict:
        """A CLIP vision tower's config at this size."""
        return dict(hidden_size=self.vision_width, intermediate_size=self.vision_intermediate,
                    num_attention_heads=self.vision_heads, num_hidden_layers=self.vision_layers,
                    image_size=self.image_size, patch_size=self.patch_size, hidden_act=self.hidden_act)

    @property
    def num_segments(self) -> int:
        """CAST's superpixels at this size: one per ViT patch (196 at 224 px / 16)."""
        return (self.image_size // self.patch_size) ** 2

    def cast_config(self) -> dict:
        """CAST's vision config at this width (`cast` must be set)."""
        depths, clusters = self.cast
        return dict(hidden_size=self.vision_width, intermediate_size=self.vision_intermediate,
                    num_attention_heads=self.vision_heads, image_size=self.image_size,
                    num_segments=self.num_segments, depths=list(depths), num_clusters=list(clusters))


SIZES = {
    "ViT-B/16": ModelSize(768, 12, 12, 3072, 224, 16, 512, 12, 8, 2048, 512, cast=((3, 3, 3, 2), (64, 32, 16))),
    "ViT-L/14": ModelSize(1024, 24, 16, 4096, 224, 14, 768, 12, 12, 3072, 768),
    "ViT-L/14-336": ModelSize(1024, 24, 16, 4096, 336, 14, 768, 12, 12, 3072, 768),
    # OpenCLIP ViT-bigG-14 (laion2b_s39b_b160k): SDXL's second text encoder is its text tower
    "ViT-bigG-14": ModelSize(1664, 48, 16, 8192, 224, 14, 1280, 32, 20, 5120, 1280, hidden_act="gelu"),
    # the tests' size: the same code at widths of 32
    "tiny": ModelSize(32, 2, 4, 64, 32, 8, 32, 2, 4, 64, 16, vocab_size=1000, cast=((1, 1), (8,))),
}


@dataclass(frozen=True)
class BuildOptions:
    """How a method is built at a size, beyond the size: OneLIP's PO-HNM (`hard_negatives` queued per sample, 0:
    none; `bank_captions` held on the device), the classes of a classifier (`num_labels`) and where the step runs
    (`target`: "gpu" or "cpu", for a method whose exact algebra differs there)."""

    hard_negatives: int = 0
    bank_captions: int = 1_200_000
    num_labels: int = 1000
    target: str = "gpu"


class PlaceholderInputs:
    """Inputs of the shapes a collator gives, their values fixed (zeros; the end-of-text token where the text
    towers pool): what a memory trace on fake tensors needs. `benchmarks/gpu_suite.py` has a random counterpart
    with the same methods. Texts are padded as the processors pad: the first `length` tokens long, the others one
    shorter, so the text towers build their attention masks."""

    def __init__(self, size: ModelSize, pixel_dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        self.size, self.pixel_dtype, self.device = size, pixel_dtype, torch.device(device)

    def texts(self, rows: int, length: int) -> dict:
        eos = self.size.eos_token_id
        ids = torch.zeros(rows, length, dtype=torch.long, device=self.device)
        mask = torch.ones(rows, length, dtype=torch.long, device=self.device)
        ids[:1, -1] = eos
        ids[1:, -2:] = eos
        mask[1:, -1] = 0
        return {"input_ids": ids, "attention_mask": mask}

    def images(self, rows: int) -> torch.Tensor:
        side = self.size.image_size
        return torch.zeros(rows, 3, side, side, dtype=self.pixel_dtype, device=self.device)

    def superpixels(self, rows: int) -> torch.Tensor:
        """(rows, H, W) label maps as CASTImageProcessor gives them: here a grid of patch-sized squares."""
        side, patch = self.size.image_size, self.size.patch_size
        cells = torch.arange(side, device=self.device) // patch
        grid = cells[:, None] * (side // patch) + cells[None]
        return grid.expand(rows, -1, -1).contiguous()

    def scores(self, rows: int) -> torch.Tensor:
        return torch.zeros(rows, device=self.device)

    def labels(self, rows: int, classes: int) -> torch.Tensor:
        return torch.zeros(rows, dtype=torch.long, device=self.device)

    def unit_vectors(self, *shape: int) -> torch.Tensor:
        return torch.zeros(*shape, device=self.device)


@dataclass(frozen=True)
class Method:
    """What a method is, in one place.

    - `build(size, options) -> (model, task)`: its model (as converted from its family's release, or as its script
      starts it) and its task at a `ModelSize`, on whatever device and tensor mode is current; the task's collator
      is None (batches come from `example_batch`).
    - `example_batch(size, rows, inputs, options) -> dict`: a batch of `rows` samples as its collator makes it,
      its tensors made by `inputs` (`PlaceholderInputs` or a random counterpart).
    - `held_outside(task) -> {what: tensors}`: what its objective holds outside the model (a frozen teacher, a bank).
    - `options_used`: the `BuildOptions` fields it reads (a plan names them).
    - `unavailable(size) -> str | None`: why it is not defined at a size (None: it is).
    - `plan_notes(options) -> list[str]`: what a memory plan of it assumes, besides the loop's assumptions.
    - `script`, `variants` (name -> the options its script builds that variant with), `card` (the Hub card's
      information) and `evaluate` (its miniature evaluation), where it has them.
    - `build_variant(variant, start, processor, **options) -> (task, processor)`: what its script trains as
      `variant` (a name of `variants`, whose options override `options`: the script's arguments of the method, an
      ablation row's): the model started from `start` (a checkpoint, or the keyword arguments of a config from
      scratch: the miniature's towers), reading `processor` (the processor or the parts it is made of, as the
      method's function says), with its task and collator; the processor it reads is returned with it.
    """

    name: str
    summary: str
    build: Callable[[ModelSize, BuildOptions], tuple[torch.nn.Module, Any]]
    example_batch: Callable[[ModelSize, int, Any, BuildOptions], dict]
    held_outside: Callable[[Any], dict] = lambda task: {}
    unavailable: Callable[[ModelSize], str | None] = lambda size: None
    plan_notes: Callable[[BuildOptions], list[str]] = lambda options: []
    script: str | None = None
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    card: Any = None
    evaluate: Callable | None = None
    build_variant: Callable[..., tuple[Any, Any]] | None = None
    aliases: tuple[str, ...] = ()
    options_used: tuple[str, ...] = ()


@cache
def methods() -> dict[str, Method]:
    """Every method, by name: the `METHODS` of each subpackage of `hf_longclip.recipes`, in folder order."""
    import hf_longclip.recipes as recipes

    found: dict[str, Method] = {}
    for module in sorted(pkgutil.iter_modules(recipes.__path__), key=lambda m: m.name):
        if not module.ispkg:
            continue
        for spec in getattr(importlib.import_module(f"{recipes.__name__}.{module.name}"), "METHODS", ()):
            for name in (spec.name, *spec.aliases):
                if name in found:
                    raise ValueError(f"two methods are called {name!r} (recipes/{module.name}/ and another)")
                found[name] = spec
    return found


def method_names() -> list[str]:
    """The methods' own names (no aliases), in registry order."""
    return list(dict.fromkeys(spec.name for spec in methods().values()))


def method(name: str) -> Method:
    """The method called `name` (or one of its aliases); a ValueError naming the known ones otherwise."""
    found = methods()
    if name not in found:
        raise ValueError(f"unknown method {name!r}; choose among {', '.join(method_names())}")
    return found[name]


__all__ = ["BOS", "EOS", "LONG_LENGTH", "SHORT_LENGTH", "SIZES", "BuildOptions", "Method", "ModelSize",
           "PlaceholderInputs", "method", "method_names", "methods"]
