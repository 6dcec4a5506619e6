"""Released checkpoints into the library's classes: the one place where the library reads pickles.

    model, processor = convert_checkpoint("longclip", "longclip-L.pt", bpe_file="bpe_simple_vocab_16e6.txt.gz")
    save_converted(model, processor, "longclip-L-hf")

`load_original_checkpoint` reads a `torch.load` file with `weights_only=True` (TorchScript archives, OpenAI's `.pt`
release format, by a restricted reader that runs none of their code), `clip_tokenizer` builds the CLIP tokenizer
(a transformers id or folder, or OpenAI's BPE file offline), and `FORMATS` names each format's converter:
`convert(state_dict, tokenizer) -> (model, processor or None)`, sizes inferred from the state dict.
`hf-longclip convert` is `convert_checkpoint` + `save_converted` (+ `training.hub.push_to_hub` with
`conversion_card`).
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import io
import json
import pickle
import tempfile
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a checkpoint is read: `hf-longclip --help` lists FORMATS without it
    import torch

# format -> "module:function", imported only when that format is converted
FORMATS = {
    "openai": "hf_longclip.models.convert_clip:convert_openai",
    "open_clip": "hf_longclip.models.convert_clip:convert_open_clip",
    "open_clip_quickgelu": "hf_longclip.models.convert_clip:convert_open_clip_quickgelu",
    "longclip": "hf_longclip.models.himo_clip.convert_longclip:convert_longclip",
    "himo": "hf_longclip.models.himo_clip.convert_longclip:convert_himo",
    "tulip": "hf_longclip.models.onelip.convert_tulip:convert",
    "flair": "hf_longclip.models.fcast.convert_flair:convert",
    "cast": "hf_longclip.models.cast.convert_cast:convert",
}
# the keys training checkpoints nest their weights under
_NESTED_KEYS = ("state_dict", "model", "module")
# The prefixes wrappers add to parameter names, stripped from a converted checkpoint's names and from those the
# optimizer groups (`training.optimizer`) read:
WRAPPER_PREFIXES = (
    "module.",  # DistributedDataParallel (and DeepSpeed's engine)
    "base_model.model.",  # peft's PeftModel (LoRA)
    "_orig_mod.",  # torch.compile's OptimizedModule
)
# MoCo (v3) checkpoints: the encoder is `base_encoder.`; its momentum copy and the predictor are training state
_MOCO_ENCODER, _MOCO_TRAINING_STATE = "base_encoder.", ("momentum_encoder.", "predictor.")


@dataclass(frozen=True)
class ReportedResult:
    """One figure the authors report for a released model: shown as reported, never as measured on a conversion.
    `model` names the released model it belongs to: a backbone ("ViT-L/14", matched against the converted model's
    vision tower) or a checkpoint name ("flair-merged30m", matched against the converted file's name)."""

    dataset: str  # as the card shows it, e.g. "Urban1k"
    metric: str  # e.g. "I2T R@1"
    value: float
    source: str  # where it is reported, e.g. "HiMo-CLIP paper, Table 1"
    model: str
    source_url: str = ""
    metric_type: str = "recall"  # the model-index metric type (HiMo@K: "pearsonr")


def reported_retrieval(dataset: str, i2t: float, t2i: float, source: str, model: str,
                       source_url: str = "") -> tuple[ReportedResult, ReportedResult]:
    """The image-to-text and text-to-image Recall@1 a paper reports on `dataset`."""
    return (ReportedResult(dataset, "I2T R@1", i2t, source, model, source_url),
            ReportedResult(dataset, "T2I R@1", t2i, source, model, source_url))


@dataclass(frozen=True)
class SourceInfo:
    """What a converted model's card says about its source: the method, its paper, where the weights come from
    (the repository and the commit checked), their license, and results the authors report (shown as reported,
    never as measured here)."""

    name: str
    paper: str
    url: str
    license: str
    reported: tuple[ReportedResult, ...] = ()
    # the parity with the original code verified by the test file: tolerance (float32) and the inputs checked
    tolerance: str = "1e-4"
    checked: str = "texts of 10, 100 and 240 tokens and on images"
    test_file: str = "tests/conversion/test_conversion_clip.py"


# ---------------------------------------------------------------------------------------------- reading checkpoints

# TorchScript storage classes -> torch dtype names
_STORAGE_DTYPES = {
    "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16", "DoubleStorage": "float64",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool",
}


class _ScriptObject:
    """A TorchScript module's saved attributes (its `__torch__` class is never imported or run)."""

    def __setstate__(self, state):
        self.attributes = state if isinstance(state, dict) else {}


class _ScriptArchiveUnpickler(pickle.Unpickler):
    """Reads the `data.pkl` of a TorchScript archive allowing tensors, ordered dicts and module attribute holders
    only; any other global is refused."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            import torch

            return getattr(torch, _STORAGE_DTYPES[name])
        if module.startswith("__torch__"):
            return _ScriptObject
        raise pickle.UnpicklingError(f"the TorchScript archive names {module}.{name}, which is not a tensor or a "
                                     "module attribute: refusing to read it")

    def persistent_load(self, pid):
        kind, dtype, key, _location, numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"unknown persistent record {kind!r} in the TorchScript archive")
        import torch

        raw = bytearray(self.archive.read(f"{self.prefix}/data/{key}"))
        return torch.frombuffer(raw, dtype=dtype, count=numel) if numel else torch.empty(0, dtype=dtype)


def _rebuild_tensor(storage, offset, size, stride, *_ignored):
    return storage.as_strided(size, stride, offset).clone()


def _script_tensors(obj, prefix: str = "") -> dict[str, torch.Tensor]:
    """Dotted name -> tensor for every tensor attribute of a TorchScript module tree (what `state_dict()` holds,
    plus tensor attributes that are not weights, e.g. an attention mask)."""
    import torch

    found = {}
    for name, value in obj.attributes.items():
        if isinstance(value, torch.Tensor):
            found[prefix + name] = value
        elif isinstance(value, _ScriptObject):
            found.update(_script_tensors(value, f"{prefix}{name}."))
    return found


def _read_torchscript(path: Path, archive: zipfile.ZipFile) -> dict[str, torch.Tensor]:
    pickles = [name for name in archive.namelist() if name.endswith("/data.pkl") and name.count("/") == 1]
    if len(pickles) != 1:
        raise ValueError(f"{path} is a TorchScript archive without a single data.pkl")
    prefix = pickles[0].split("/")[0]
    root = _ScriptArchiveUnpickler(archive.read(pickles[0]), archive, prefix).load()
    if not isinstance(root, _ScriptObject):
        raise ValueError(f"{path}: the TorchScript archive does not hold a module")
    return _script_tensors(root)


def _is_torchscript(archive: zipfile.ZipFile) -> bool:
    return any(name.endswith("/constants.pkl") for name in archive.namelist())


def _unwrap(checkpoint, path) -> dict[str, torch.Tensor]:
    """The state dict inside a checkpoint, name -> tensor: found under `state_dict` / `model` / `module` (the first
    of these a dict holds, however many other entries sit beside it: an optimizer, an epoch, MoCo's `best_acc1`
    tensor, DeiT's EMA copy), without the prefixes wrappers add (`WRAPPER_PREFIXES`). A state dict holding anything
    but tensors is refused, naming those entries."""
    import torch

    while isinstance(checkpoint, dict):
        nested = next((checkpoint[key] for key in _NESTED_KEYS if isinstance(checkpoint.get(key), dict)), None)
        if nested is None:
            break
        checkpoint = nested
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path} holds a {type(checkpoint).__name__}, not a dict of weights")
    others = sorted(str(name) for name, value in checkpoint.items() if not isinstance(value, torch.Tensor))
    if others or not checkpoint:
        raise ValueError(f"{path} holds no state dict (a dict of tensors, or one under {', '.join(_NESTED_KEYS)}): "
                         f"entries that are not tensors: {others[:10]}")
    weights = dict(checkpoint)
    while wrapper := next((w for w in WRAPPER_PREFIXES if all(name.startswith(w) for name in weights)), None):
        weights = {name[len(wrapper):]: value for name, value in weights.items()}
    if any(name.startswith(_MOCO_ENCODER) for name in weights):
        others = [name for name in weights if not name.startswith((_MOCO_ENCODER, *_MOCO_TRAINING_STATE))]
        if others:
            raise ValueError(f"{path}: a MoCo checkpoint (base_encoder.*) with other weights too: {others[:5]}")
        weights = {name[len(_MOCO_ENCODER):]: value for name, value in weights.items()
                   if name.startswith(_MOCO_ENCODER)}
    return weights


def load_original_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a released checkpoint, name -> tensor, read without running any code from the file.

    A `torch.save` pickle is read with `torch.load(weights_only=True)` (a file that needs more, e.g. a pickled
    model object or argparse namespace, is refused with the reason); a TorchScript archive (OpenAI's `.pt`) by a
    reader that only rebuilds its tensors; a `.safetensors` file directly. The state dict is found under
    `state_dict`, `model` or `module` (beside an optimizer, counters, an argparse namespace of the command line),
    and the prefixes wrappers add (`WRAPPER_PREFIXES`) are removed; of a MoCo checkpoint
    (`module.base_encoder.`) the base encoder is kept, its momentum copy and predictor (training state) dropped.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if _is_torchscript(archive):
                return _read_torchscript(path, archive)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):  # DeiT's saved command line: plain attributes
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"{path} is not a plain weights file: torch.load(weights_only=True) refused it "
            f"({str(err).splitlines()[0]}). "
            "Only weights are read here; save the state dict alone (torch.save(model.state_dict(), ...)) from code "
            "you trust."
        ) from None
    return _unwrap(checkpoint, path)


# ------------------------------------------------------------------------------------------------------ tokenizer

def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, which CLIP's BPE vocabulary is written in, in its order:
    the printable bytes as themselves, then every other byte as chr(256 + n)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return {**{byte: chr(byte) for byte in printable}, **{byte: chr(256 + n) for n, byte in enumerate(others)}}


# OpenAI's tokenizer uses the first 48,894 merges of its BPE file: 49,408 ids = 2 x 256 bytes + merges + 2 specials
CLIP_MERGES = 49152 - 256 - 2


def _vocabulary_files(bpe_file: Path, directory: Path) -> tuple[Path, Path]:
    """vocab.json and merges.txt of OpenAI's CLIP tokenizer, from its `bpe_simple_vocab_16e6.txt.gz`."""
    with gzip.open(bpe_file, "rt", encoding="utf-8") as handle:
        merges = handle.read().split("\n")[1:CLIP_MERGES + 1]
    if len(merges) != CLIP_MERGES or any(len(merge.split(" ")) != 2 for merge in merges):
        raise ValueError(f"{bpe_file} is not OpenAI's CLIP BPE file (bpe_simple_vocab_16e6.txt.gz)")
    symbols = list(_bytes_to_unicode().values())
    tokens = symbols + [symbol + "</w>" for symbol in symbols] + ["".join(merge.split(" ")) for merge in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    vocab_path.write_text(json.dumps({token: index for index, token in enumerate(tokens)}), encoding="utf-8")
    merges_path.write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return vocab_path, merges_path


def clip_tokenizer(tokenizer: str | None = None, bpe_file: str | Path | None = None, max_length: int = 248):
    """A transformers `CLIPTokenizer` reading `max_length` tokens: from a Hub id or folder (`tokenizer`), or built
    offline from OpenAI's BPE file (`bpe_file`, `bpe_simple_vocab_16e6.txt.gz`, which the CLIP, Long-CLIP and
    open_clip repositories ship). Padding uses id 0, as OpenAI's `clip.tokenize` and Long-CLIP's pad with zeros, so
    the ids equal the original tokenizer's; truncation keeps the end-of-text token last."""
    from transformers import CLIPTokenizer

    if (tokenizer is None) == (bpe_file is None):
        raise ValueError("give either a tokenizer (Hub id or folder) or OpenAI's BPE file, not both or neither")
    if tokenizer is not None:
        loaded = CLIPTokenizer.from_pretrained(tokenizer, model_max_length=max_length)
    else:
        bpe_file = Path(bpe_file)
        if not bpe_file.is_file():
            raise FileNotFoundError(f"no BPE file at {bpe_file}")
        with tempfile.TemporaryDirectory() as directory:
            vocab, merges = _vocabulary_files(bpe_file, Path(directory))
            loaded = CLIPTokenizer(str(vocab), str(merges), model_max_length=max_length)
    loaded.pad_token = loaded.convert_ids_to_tokens(0)  # "!": the original tokenizers' padding id
    return loaded


# ----------------------------------------------------------------------------------------------------- converting

def pop_weight(state: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    """`state[key]`, removed from `state`; a missing key is named in the error."""
    if key not in state:
        raise ValueError(f"the checkpoint has no {key!r}: not the layout this converter reads")
    return state.pop(key)


def check_consumed(state: dict[str, torch.Tensor], format_name: str) -> None:
    """Raise if a converter left keys it did not read: a checkpoint of another layout, never silently dropped."""
    if state:
        raise ValueError(f"weights a {format_name} checkpoint does not have (another architecture?): "
                         f"{sorted(state)[:10]}{' ...' if len(state) > 10 else ''}")


def load_converted(model_class, config, state: dict):
    """`model_class(config)` in eval mode holding exactly `state` (every weight, nothing left out), without random
    init."""
    from transformers import initialization as init

    with init.no_init_weights():
        model = model_class(config)
    if "logit_scale" in state:
        state = {**state, "logit_scale": state["logit_scale"].reshape(model.logit_scale.shape)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if not name.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"converted weights do not fit {model_class.__name__}: missing {missing}, "
                         f"unexpected {unexpected}")
    return model.eval()


def converter(format: str) -> Callable:
    """The converter of `format` (a FORMATS key), imported on demand."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; choose among {', '.join(FORMATS)}")
    module, function = FORMATS[format].split(":")
    return getattr(importlib.import_module(module), function)


def convert_checkpoint(format: str, checkpoint: str | Path, tokenizer: str | None = None,
                       bpe_file: str | Path | None = None):
    """(model, processor) converted from the released `checkpoint` file of `format` (see FORMATS); the processor
    is None when neither `tokenizer` nor `bpe_file` is given (the model alone is converted)."""
    convert = converter(format)
    state_dict = load_original_checkpoint(checkpoint)
    text_tokenizer = None if tokenizer is None and bpe_file is None else clip_tokenizer(tokenizer, bpe_file)
    return convert(state_dict, text_tokenizer)


def source_info(format: str) -> SourceInfo | None:
    """The card information a converter module declares for `format` (its `SOURCES` dict), if any."""
    module = importlib.import_module(FORMATS[format].split(":")[0])
    return getattr(module, "SOURCES", {}).get(format)


def save_converted(model, processor, output_dir: str | Path) -> Path:
    """Write a converted model (and its processor) to `output_dir` as a checkpoint that loads with `AutoModel` /
    `AutoProcessor` (`trust_remote_code=True` for the library's classes; a model with a head, such as CAST's
    classifier, also with `AutoModel`, which gives its backbone: see `CodeBundleMixin.saved_auto_map`). The text
    tower alone, for a diffusers pipeline: `hf_longclip.integrations.diffusion.save_text_encoder`."""
    output_dir = Path(output_dir)
    model.save_pretrained(output_dir)
    if processor is not None:
        processor.save_pretrained(output_dir)
    return output_dir


def released_model_names(model=None, checkpoint: str | Path | None = None) -> set[str]:
    """What identifies a converted model among the released ones (see `ReportedResult.model`): its vision backbone
    ("ViT-L/14", "ViT-B/16", "ViT-L/14-336") and the converted file's name."""
    names = set()
    vision = getattr(getattr(model, "config", None), "vision_config", None)
    sizes = {768: "B", 1024: "L", 1280: "H"}
    if vision is not None and getattr(vision, "hidden_size", None) in sizes:
        image = getattr(vision, "image_size", 224)
        names.add(f"ViT-{sizes[vision.hidden_size]}/{vision.patch_size}" + (f"-{image}" if image != 224 else ""))
    if checkpoint is not None:
        names.add(Path(checkpoint).stem)
    return names


def _model_index(results: list[ReportedResult], paper: str):
    """The model-index entries (huggingface_hub `EvalResult`s) of reported retrieval figures."""
    from huggingface_hub import EvalResult

    return [EvalResult(task_type="image-text-retrieval", task_name="Image-text retrieval",
                       dataset_type=result.dataset.lower().replace(" ", "-"), dataset_name=result.dataset,
                       metric_type=result.metric_type, metric_name=f"{result.metric} (as reported: {result.source})",
                       metric_value=result.value, verified=False,
                       source_name=paper if result.source_url else None, source_url=result.source_url or None)
            for result in results]


def conversion_card(format: str, repo_id: str, text_encoder_only: bool = False, model=None,
                    checkpoint: str | Path | None = None, output_dir: str | Path | None = None):
    """The model card of a converted checkpoint: the source's method, paper, license and origin, what was
    converted and the verified parity, and the authors' results marked as reported. The figures of the released
    model this conversion is (`model`'s backbone or the `checkpoint` file's name, see `released_model_names`) also
    go into the card's `model-index` metadata (reported, unverified), which the Hub shows; a text tower alone
    carries none there. With `output_dir`, the folder the conversion was saved in, the card names the Auto classes
    its `config.json` maps to the checkpoint's own code (`auto_map`)."""
    from huggingface_hub import ModelCard, ModelCardData

    info = source_info(format)
    if info is None:
        raise ValueError(f"the {format} converter declares no source information for a model card")
    what = "its text tower, as a transformers `CLIPTextModel`" if text_encoder_only else "the whole model"
    reported = "\n".join(f"| {r.dataset} | {r.metric} | {r.model} | {r.value:g} | {r.source} |" for r in info.reported)
    names = released_model_names(model, checkpoint)
    own = [] if text_encoder_only else [result for result in info.reported if result.model in names]
    name = repo_id.split("/")[-1]
    data = ModelCardData(license=info.license, library_name="transformers",
                         tags=["hf-longclip", "clip", "long-captions", "converted"],
                         model_name=name if own else None, eval_results=_model_index(own, info.paper) or None)
    body = (
        f"---\n{data.to_yaml()}\n---\n\n# {repo_id.split('/')[-1]}\n\n"
        f"{info.name} ({info.paper}), converted from the released weights ({info.url}) by "
        f"`hf-longclip convert {format}`: {what}. The weights are the authors'; their license applies.\n\n"
        f"Parity: features and logits of this checkpoint equal those of the original implementation on the same "
        f"weights within {info.tolerance} (float32), on {info.checked} (verified on random weights saved in the "
        f"released format; see hf-longclip's {info.test_file}).\n\n"
    )
    auto_map = {}
    if output_dir is not None and (Path(output_dir) / "config.json").is_file():
        auto_map = json.loads((Path(output_dir) / "config.json").read_text()).get("auto_map") or {}
    loaders = [f"`{name}` ({target.rsplit('.', 1)[-1]})" for name, target in sorted(auto_map.items(), reverse=True)
               if name.startswith("AutoModel")]
    if loaders:
        body += f"It loads with {' and '.join(loaders)}, `trust_remote_code=True`.\n\n"
    if reported:
        body += ("## Results reported by the authors\n\nAs reported by the authors, not measured on this conversion"
                 + (" (this model's figures are also in the card's metadata)" if own else "") + ":\n\n"
                 f"| benchmark | metric | released model | reported | source |\n| --- | --- | --- | --- | --- |\n"
                 f"{reported}\n")
    return ModelCard(body)
