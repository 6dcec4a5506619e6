"""Our checkpoints in LAION's CLIP_benchmark (`clip-benchmark` 1.6.2), at the model's full text length, on the
long-caption benchmarks the library reads::

    python -m hf_longclip.integrations.clip_benchmark write-wds --dataset urban1k --data-dir data/Urban1k \\
        --output-dir wds/urban1k
    python -m hf_longclip.integrations.clip_benchmark eval --model_type hf_longclip --model himo-clip \\
        --pretrained PATH_OR_HUB_ID --dataset wds/urban1k --dataset_root wds/urban1k --task zeroshot_retrieval \\
        --recall_k 1 5 10 --no_amp --output urban1k.json
    python -m hf_longclip.integrations.clip_benchmark build urban1k.json --output benchmark.csv

`eval` and `build` are CLIP_benchmark's own command line (`clip_benchmark.cli.main`: its parser, its webdataset
reader, its `zeroshot_retrieval.evaluate`, its JSON and CSV), run after `register_model_type` has added the model
type ``hf_longclip``. What CLIP_benchmark fixes, read from its source:

- ``--model_type`` takes the keys of `clip_benchmark.models.TYPE2FUNC` (``open_clip``, ``ja_clip``), copied into
  `MODEL_TYPES` when that module is imported; there is no loader by module path, so the type is added to both before
  the parser is built. A loader gets ``(model_name, pretrained, cache_dir, device)`` and returns ``(model,
  transform, tokenizer)``: here ``--pretrained`` is the checkpoint (a folder or a Hub id, ours or a plain
  `CLIPModel`, as open_clip's ``--pretrained`` names the weights) and ``--model`` only the name the result records.
- A ``wds/<name>`` dataset is read from ``--dataset_root``: ``<split>/nshards.txt``, ``<split>/0.tar ...``, and
  ``dataset_type.txt`` reading ``retrieval``; each sample an image member (``.webp``/``.png``/``.jpg``/``.jpeg``) and
  a ``.txt`` member whose lines are the image's captions (`str.splitlines`). `write_wds` writes that from any
  benchmark `hf-longclip eval` reads, in its row order: the image as lossless PNG after the library's 8-bit RGB
  conversion (what `hf-longclip eval` encodes), a caption's own line breaks as spaces and an empty caption (Urban1k
  has one) as one space, so that no caption is split or lost (CLIP's tokenizer reads both as before).
- ``zeroshot_retrieval`` normalises the embeddings, scores every text against every image and reports
  ``image_retrieval_recall@K`` (text -> image) and ``text_retrieval_recall@K`` (image -> text: some caption of the
  image among the top K) as fractions: `hf-longclip eval`'s R@K over 100. It picks the top K with `torch.topk`,
  which leaves the order of tied scores to the kernel (on the CPU neither the lower nor the higher index reliably
  first), so the two agree wherever no tie decides a recall, and a tied one lands between `hf-longclip eval`'s
  ``--tie-rule pessimistic`` and ``optimistic`` (its report counts such queries: ``ties_i2t``, ``ties_t2i``).
  Under ``--amp`` (its default) it encodes in autocast, bfloat16 on a CPU: ``--no_amp`` gives the float32
  embeddings `hf-longclip eval` computes.

Texts are cut where `hf-longclip eval` cuts them (`hf_longclip.evaluation.encoding.text_max_length`: 248 tokens for
HiMo-CLIP and a converted Long-CLIP, never 77). CLIP_benchmark hands the model one image tensor per batch; a model
whose processor gives more per image (F-CAST's superpixel map) gets those maps as further channels of that tensor
(integer ids below 2**24, exact in float32), split off again before the forward.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

import torch
from PIL import Image

from ..evaluation.encoding import retrieval_texts, text_inputs
from ..evaluation.loading import load_model
from ..modeling_common.images import to_rgb_images
from ..modeling_common.optional import require
from . import BENCHMARK_PACKAGES

MODEL_TYPE = "hf_longclip"
DATASET_TYPE = "retrieval"
SHARD_SIZE = 1000
MANIFEST = "hf_longclip.json"


class ImageLayout:
    """How one image's processor outputs travel as one tensor: ``pixel_values`` first, then each further per-pixel
    map (F-CAST's ``superpixels``) as one more channel. Read from the processor's output on a probe image."""

    def __init__(self, processor):
        probe = processor(images=[Image.new("RGB", (16, 16), (127, 127, 127))], return_tensors="pt")
        self.keys = list(probe.keys())
        self.channels = [probe[key][0].shape[0] if probe[key][0].ndim == 3 else 1 for key in self.keys]
        self.dtypes = [probe[key].dtype for key in self.keys]

    def pack(self, inputs) -> torch.Tensor:
        """One image's processor outputs (batch of one) as a (channels, H, W) float32 tensor."""
        parts = [inputs[key][0].float().reshape(-1, *inputs[key][0].shape[-2:]) for key in self.keys]
        return torch.cat(parts)

    def unpack(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        """A batch of packed tensors (batch, channels, H, W) as the model's keyword inputs."""
        inputs, start = {}, 0
        for key, channels, dtype in zip(self.keys, self.channels, self.dtypes):
            part = batch[:, start : start + channels]
            inputs[key] = (part if key == "pixel_values" or channels > 1 else part[:, 0]).to(dtype)
            start += channels
        return inputs


class ImageTransform:
    """CLIP_benchmark's ``transform``: one PIL image -> the packed tensor of its processor outputs."""

    def __init__(self, processor, layout: ImageLayout):
        self.processor, self.layout = processor, layout

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return self.layout.pack(self.processor(images=to_rgb_images([image]), return_tensors="pt"))


class TextTokenizer:
    """CLIP_benchmark's ``tokenizer``: texts -> the processor's inputs, cut at the model's length (`text_inputs`)."""

    def __init__(self, model, processor):
        self.model, self.processor = model, processor

    def __call__(self, texts: Sequence[str]):
        return text_inputs(self.model, self.processor, list(texts))


class CLIPBenchmarkModel(torch.nn.Module):
    """A dual encoder as CLIP_benchmark calls it: ``encode_image(packed images)`` and ``encode_text(processor
    inputs)`` return the projected embeddings (`pooler_output`; CLIP_benchmark normalises them)."""

    def __init__(self, model, layout: ImageLayout):
        super().__init__()
        self.model, self.layout = model, layout

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.model.get_image_features(**self.layout.unpack(images.to(self.model.device))).pooler_output

    def encode_text(self, inputs) -> torch.Tensor:
        return self.model.get_text_features(**inputs.to(self.model.device)).pooler_output


def load_hf_longclip(model_name: str = "", pretrained: str = "", cache_dir: str | None = None, device="cpu"):
    """CLIP_benchmark's loader (``TYPE2FUNC[MODEL_TYPE]``): the checkpoint ``pretrained`` (folder or Hub id; an
    empty one: ``model_name``) as ``(model, transform, tokenizer)``. ``cache_dir`` is huggingface_hub's (``HF_HOME``)
    and is not passed on."""
    model, processor = load_model(pretrained or model_name, str(device))
    layout = ImageLayout(processor)
    return CLIPBenchmarkModel(model, layout), ImageTransform(processor, layout), TextTokenizer(model, processor)


def register_model_type() -> None:
    """Add ``hf_longclip`` to CLIP_benchmark's model types (its `TYPE2FUNC` and `MODEL_TYPES`), before its command
    line is parsed."""
    models = require("clip_benchmark.models", "benchmarks", BENCHMARK_PACKAGES, "CLIP_benchmark's command line")
    models.TYPE2FUNC[MODEL_TYPE] = load_hf_longclip
    if MODEL_TYPE not in models.MODEL_TYPES:
        models.MODEL_TYPES.append(MODEL_TYPE)


def _caption_line(caption: str) -> str:
    """One caption as one line of a ``.txt`` member: its own line breaks become spaces; empty: one space."""
    return " ".join(caption.splitlines()) or " "


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    tar.addfile(info, io.BytesIO(data))


def write_wds(dataset, output_dir: str | Path, split: str = "test", shard_size: int = SHARD_SIZE,
              manifest: dict | None = None) -> Path:
    """Write the rows of `dataset` (the sample schema: ``image`` with ``captions`` or ``caption``) in the webdataset
    layout CLIP_benchmark reads as ``wds/<name>`` with ``--dataset_root output_dir`` (module docstring), shards of
    `shard_size` images, rows in order; `manifest` (what was written from where) goes to ``hf_longclip.json``."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}")
    output_dir = Path(output_dir)
    (output_dir / split).mkdir(parents=True, exist_ok=True)
    texts, owners = retrieval_texts(dataset)
    captions = [[] for _ in range(len(dataset))]
    for text, owner in zip(texts, owners):
        captions[owner].append(text)
    shards = range(0, len(dataset), shard_size)
    for shard, start in enumerate(shards):
        with tarfile.open(output_dir / split / f"{shard}.tar", "w") as tar:
            for index in range(start, min(start + shard_size, len(dataset))):
                png = io.BytesIO()
                to_rgb_images([dataset[index]["image"]])[0].save(png, format="PNG")
                _add_member(tar, f"{index:08d}.png", png.getvalue())
                _add_member(tar, f"{index:08d}.txt", "\n".join(map(_caption_line, captions[index])).encode())
    (output_dir / split / "nshards.txt").write_text(f"{len(shards)}\n")
    (output_dir / "dataset_type.txt").write_text(f"{DATASET_TYPE}\n")
    record = {**(manifest or {}), "split": split, "num_images": len(dataset), "num_texts": len(texts),
              "num_shards": len(shards)}
    (output_dir / MANIFEST).write_text(json.dumps(record, indent=2))
    return output_dir


def write_benchmark_wds(name: str, data_dir: str | None, output_dir: str | Path, split: str | None = None,
                        max_samples: int | None = None, protocol: str | None = None,
                        shard_size: int = SHARD_SIZE) -> Path:
    """Read benchmark `name` as `hf-longclip eval --dataset name` does and `write_wds` its rows."""
    from ..data.eval_datasets import load_eval_benchmark

    benchmark = load_eval_benchmark(name, data_dir, split, max_samples, protocol)
    manifest = {"benchmark": name, "protocol": benchmark.protocol or None, "source": str(benchmark.source),
                "num_skipped_images": benchmark.num_skipped}
    return write_wds(benchmark.dataset, output_dir, benchmark.split or "test", shard_size, manifest)


def _write_wds_command(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m hf_longclip.integrations.clip_benchmark write-wds",
                                     description="write a benchmark in the webdataset layout CLIP_benchmark reads")
    parser.add_argument("--dataset", required=True, help="a benchmark of `hf-longclip eval --dataset`")
    parser.add_argument("--data-dir", help="the benchmark's files, as for `hf-longclip eval`")
    parser.add_argument("--output-dir", required=True, help="CLIP_benchmark's --dataset_root")
    parser.add_argument("--protocol", help="the benchmark's file layout (default: its first)")
    parser.add_argument("--split", help="default: the benchmark's evaluation split (the folder name written)")
    parser.add_argument("--max-samples", type=int, help="the first N samples only (default: all)")
    parser.add_argument("--shard-size", type=int, default=SHARD_SIZE, help=f"images per .tar (default {SHARD_SIZE})")
    args = parser.parse_args(argv)
    path = write_benchmark_wds(args.dataset, args.data_dir, args.output_dir, args.split, args.max_samples,
                               args.protocol, args.shard_size)
    print(json.loads((path / MANIFEST).read_text()))


def main(argv: Sequence[str] | None = None) -> None:
    """``write-wds ...`` (`write_benchmark_wds`), or CLIP_benchmark's own command line (``eval``, ``build``) with
    the ``hf_longclip`` model type registered."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["write-wds"]:
        return _write_wds_command(argv[1:])
    register_model_type()
    from clip_benchmark import cli

    sys.argv = ["clip_benchmark", *argv]
    cli.main()


if __name__ == "__main__":
    main()
