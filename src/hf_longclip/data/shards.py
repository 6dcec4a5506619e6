"""Training data at the papers' scale: WebDataset tar shards, written once and streamed through `datasets`.

    write_shards(dataset, "shards/", shard_size=1000, num_workers=8)      # `hf-longclip shard` does this
    stream = ShardStream(expand_shards("shards/{00000..00127}.tar"), rank, world_size, seed=0, buffer_size=1000)

A shard is a POSIX tar of samples in WebDataset's convention: `<key>.png` / `<key>.jpg` (the image, the source file's
own bytes when it has one) and `<key>.json` (every other field of the row in our sample schema: `caption`,
`sentences`, `captions`, ...). `manifest.json` beside the shards lists each shard's name, sample count, size and
SHA-256; writing is parallel (one process per shard), atomic per shard, and a re-run skips shards that match it.

Streaming (`ShardStream`): `datasets.load_dataset("webdataset", ..., streaming=True)` reads the shards (local or
`hf://` paths); `split_dataset_by_node` gives each process a fixed, disjoint set of shards (their number must be a
multiple of the processes); `shuffle(seed, buffer_size)` and `set_epoch` make the order a function of seed and
epoch; in a `DataLoader`, `datasets` splits each process's shards across the workers, and images are decoded (here,
so that a corrupt one is skipped and counted rather than ending the stream) and preprocessed in the workers.

Exact resume: `datasets` can checkpoint a stream but not the content of its shuffle buffer, so a resumed stream
would lose the buffered samples. Instead each worker counts the examples it has taken from its (deterministic)
stream in the current epoch (`state_dict`, which torchdata's `StatefulDataLoader` collects per worker) and a
resumed worker replays its stream from the epoch's start, skipping that many examples without decoding them: the
resumed run sees exactly the samples an uninterrupted run would, at the cost of re-reading the skipped bytes.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import datasets
from datasets.distributed import split_dataset_by_node
import torch
from braceexpand import braceexpand
from PIL import Image
from tqdm.auto import tqdm

from ..fileio import sha256_file

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "webp")
SKIPPED = "__skipped__"  # key a streamed row carries: corrupt samples skipped just before it


def expand_shards(pattern: str) -> list[str]:
    """Brace expansion of a shard pattern (`path/{00000..00127}.tar`, comma lists, several patterns separated by
    `::`), local paths or `hf://` URLs."""
    return [url for part in pattern.split("::") for url in braceexpand(part.strip())]


def _exists(url: str) -> bool:
    if "://" in url:
        from huggingface_hub import HfFileSystem

        return HfFileSystem().exists(url)
    return Path(url).is_file()


def check_shards(urls: Sequence[str]) -> None:
    """Raise FileNotFoundError naming every shard that does not exist (before any training starts)."""
    if not urls:
        raise FileNotFoundError("the shard pattern names no file")
    missing = [url for url in urls if not _exists(url)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise FileNotFoundError(f"{len(missing)} of {len(urls)} training shards do not exist: {shown}")


def shard_sample_counts(urls: Sequence[str]) -> list[int]:
    """Samples per shard, from the `manifest.json` of the shards' directory (local shards); counted by reading the
    tars when there is none."""
    counts = {}
    for directory in {str(Path(url).parent) for url in urls if "://" not in url}:
        manifest = Path(directory) / MANIFEST
        if manifest.is_file():
            for entry in json.loads(manifest.read_text())["shards"]:
                counts[str(Path(directory) / entry["name"])] = entry["samples"]
    result = []
    for url in urls:
        if url not in counts:
            with datasets.utils.file_utils.xopen(url, "rb") as handle, tarfile.open(fileobj=handle, mode="r|") as tar:
                counts[url] = len({member.name.split(".", 1)[0] for member in tar if member.isfile()})
        result.append(counts[url])
    return result


# ---------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------
def _image_bytes(image: dict | Image.Image) -> tuple[bytes, str]:
    """(bytes, extension) of an image cell: the source file's bytes when it has them, else PNG."""
    if isinstance(image, dict):
        if image.get("bytes"):
            data = image["bytes"]
        else:
            data = Path(image["path"]).read_bytes()
        kind = (Image.open(io.BytesIO(data)).format or "PNG").lower()
        return data, {"jpeg": "jpg"}.get(kind, kind)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue(), "png"


def _jsonable(value):
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def _write_shard(dataset: datasets.Dataset, index: int, start: int, stop: int, path: Path,
                 image_column: str) -> dict:
    """Write rows [start, stop) as shard `path` (through a temporary name); its manifest entry."""
    temp = path.with_name(f".{path.name}.tmp")
    rows = dataset.select(range(start, stop)).cast_column(image_column, datasets.Image(decode=False))
    with tarfile.open(temp, "w", format=tarfile.PAX_FORMAT) as tar:
        for offset, row in enumerate(rows):
            key = f"{index:05d}_{offset:06d}"
            data, extension = _image_bytes(row.pop(image_column))
            fields = json.dumps(_jsonable(row), ensure_ascii=False).encode()
            for name, payload in ((f"{key}.{extension}", data), (f"{key}.json", fields)):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(payload), 0  # no timestamps: the same rows give the same bytes
                tar.addfile(info, io.BytesIO(payload))
    with temp.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return {"name": path.name, "samples": stop - start, "bytes": path.stat().st_size, "sha256": sha256_file(path)}



def write_shards(dataset: datasets.Dataset, output_dir: str | Path, shard_size: int = 1000, num_workers: int = 1,
                 image_column: str = "image", description: str = "") -> Path:
    """Write `dataset` (rows in our sample schema) as `output_dir/{00000..}.tar` with `manifest.json`, `num_workers`
    processes writing shards in parallel, with a progress bar. Shards already listed in the manifest whose file
    still has the listed SHA-256 are kept (a re-run after a crash finishes the rest). Returns the manifest path."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    if image_column not in dataset.column_names:
        raise ValueError(f"the dataset has no {image_column!r} column (columns: {dataset.column_names})")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = output_dir / MANIFEST
    previous = {}
    if manifest_path.is_file():
        previous = {entry["name"]: entry for entry in json.loads(manifest_path.read_text())["shards"]}
    bounds = [(start, min(start + shard_size, len(dataset))) for start in range(0, len(dataset), shard_size)]
    width = max(5, len(str(len(bounds) - 1)))
    names = [f"{index:0{width}d}.tar" for index in range(len(bounds))]
    entries, pending = {}, []
    for index, (name, (start, stop)) in enumerate(zip(names, bounds)):
        old, path = previous.get(name), output_dir / name
        if old and old["samples"] == stop - start and path.is_file() and sha256_file(path) == old["sha256"]:
            entries[name] = old
        else:
            pending.append((index, start, stop, path))
    with tqdm(total=len(bounds), initial=len(entries), desc="writing shards") as progress:
        if num_workers <= 1:
            for index, start, stop, path in pending:
                entries[path.name] = _write_shard(dataset, index, start, stop, path, image_column)
                progress.update(1)
        else:
            with ProcessPoolExecutor(num_workers) as pool:
                futures = [pool.submit(_write_shard, dataset, index, start, stop, path, image_column)
                           for index, start, stop, path in pending]
                for future in as_completed(futures):
                    entry = future.result()
                    entries[entry["name"]] = entry
                    progress.update(1)
    manifest = {"description": description, "num_samples": len(dataset), "fields": dataset.column_names,
                "shards": [entries[name] for name in names]}
    temp = manifest_path.with_name(f".{MANIFEST}.tmp")
    temp.write_text(json.dumps(manifest, indent=1))
    os.replace(temp, manifest_path)
    logger.info(f"{len(pending)} shard(s) written, {len(bounds) - len(pending)} kept, in {output_dir}")
    return manifest_path


def shard_source(source: str, data_dir: str | None = None, split: str | None = None,
                 max_samples: int | None = None) -> datasets.Dataset:
    """The rows `hf-longclip shard` writes: "synthetic" (the scenes; `data_dir` is their cache), a benchmark of
    `hf_longclip.data.benchmarks` (files under `data_dir`), a CSV / JSON Lines file with an `image` column of paths
    (relative to the file) and a `caption` column, or an image folder with a `metadata.csv` / `metadata.jsonl`
    (datasets' ImageFolder: `file_name` and `caption`)."""
    path = Path(source)
    if path.is_dir():
        dataset = datasets.load_dataset("imagefolder", data_dir=str(path), split="train")
    elif path.suffix in (".csv", ".jsonl", ".json"):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        dataset = datasets.load_dataset("csv" if path.suffix == ".csv" else "json", data_files=str(path),
                                        split="train")
        missing = {"image", "caption"} - set(dataset.column_names)
        if missing:
            raise ValueError(f"{path} needs the columns image (a path) and caption; missing {sorted(missing)}")
        dataset = dataset.map(lambda row: {"image": str(path.parent / row["image"])})
        dataset = dataset.cast_column("image", datasets.Image())
    else:
        from .eval_datasets import load_eval_dataset

        dataset = load_eval_dataset(source, data_dir, split or "train", max_samples)[0]
        return dataset
    if "caption" not in dataset.column_names:
        raise ValueError(f"{source} has no caption column (columns: {dataset.column_names})")
    return dataset if max_samples is None else dataset.select(range(min(max_samples, len(dataset))))


# ---------------------------------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------------------------------
class ShardStream(torch.utils.data.IterableDataset):
    """The rows of WebDataset shards in our sample schema (`image` decoded as RGB plus the JSON's fields), this
    process's share (`rank` of `world_size`), shuffled by `seed` and the epoch (`set_epoch`); corrupt samples (image
    bytes that do not decode, no caption) are skipped, and the next row carries how many in `SKIPPED`. Resumable
    exactly per data-loader worker (`state_dict` / `load_state_dict`, see the module docstring)."""

    def __init__(self, urls: Sequence[str], rank: int = 0, world_size: int = 1, seed: int = 0,
                 buffer_size: int = 1000, text_column: str = "caption"):
        if len(urls) % world_size:
            raise ValueError(f"{len(urls)} shards cannot be split evenly across {world_size} processes: use a "
                             f"multiple of {world_size} shards")
        check_shards(urls)
        self.urls, self.rank, self.world_size = list(urls), rank, world_size
        self.seed, self.buffer_size, self.text_column = seed, buffer_size, text_column
        self.epoch, self._consumed, self._resume = 0, 0, 0
        stream = datasets.load_dataset("webdataset", data_files={"train": self.urls}, split="train", streaming=True)
        stream = split_dataset_by_node(stream.decode(False), rank, world_size)
        self._stream = stream.shuffle(seed=seed, buffer_size=buffer_size) if buffer_size > 1 else stream
        self.image_keys = [key for key in stream.features if key in IMAGE_EXTENSIONS]
        if not self.image_keys:
            raise ValueError(f"the shards hold no image field ({'/'.join(IMAGE_EXTENSIONS)}), only "
                             f"{sorted(stream.features)}")

    def set_epoch(self, epoch: int) -> None:
        """Call in the main process, before the epoch's iterator starts its workers: they inherit the epoch.
        (`datasets` keeps it in a tensor shared with the workers and updates it by read-modify-write, so two
        workers setting it at once can leave another epoch's order.)"""
        if epoch != self.epoch:
            self.epoch, self._consumed, self._resume = epoch, 0, 0
        self._stream.set_epoch(epoch)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "consumed": self._consumed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self._resume = state["epoch"], state["consumed"]

    def _row(self, example: dict) -> dict | None:
        """Our schema's row for a raw example, or None when it is corrupt."""
        fields = dict(example.get("json") or {})
        if not isinstance(fields.get(self.text_column), str) or not fields[self.text_column].strip():
            return None
        cell = next((example[key] for key in self.image_keys if example.get(key)), None)
        try:
            image = Image.open(io.BytesIO(cell["bytes"]))
            image.load()
        except Exception:  # noqa: BLE001 (any undecodable image is skipped and counted)
            return None
        return {**fields, "image": image.convert("RGB"), "__key__": example["__key__"]}

    def __iter__(self):
        self._consumed, skipped = self._resume, 0
        for position, example in enumerate(self._stream):
            if position < self._resume:
                continue  # replaying to the resume point: not decoded
            self._consumed = position + 1
            row = self._row(example)
            if row is None:
                skipped += 1
                logger.warning(f"skipping corrupt sample {example['__key__']} of {example['__url__']}")
                continue
            row[SKIPPED], skipped = skipped, 0
            yield row
        self._resume = 0
