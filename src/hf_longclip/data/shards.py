"""Training data at the papers' scale: WebDataset tar shards, written once and streamed through `datasets`.

    write_shards(dataset, "shards/", shard_size=1000, num_workers=8)      # `hf-longclip shard` does this
    stream = ShardStream(expand_shards("shards/{00000..00127}.tar"), rank, world_size, seed=0, buffer_size=1000)

A shard is a POSIX tar of samples in WebDataset's convention: `<key>.<ext>` (the image: the source file's own
bytes, `ext` its format's usual extension, so one shard may mix PNG, JPEG, GIF, ...) and `<key>.json` (every other
field of the row in our sample schema: `caption`, `sentences`, `captions`, ...). `manifest.json` beside the shards
lists each shard's name, sample count, size and SHA-256; writing is parallel (one process per shard), atomic per
shard, and a re-run skips shards that match it.

Verification (`verify_shards`, run by `ShardStream` before anything is streamed): every shard must exist; one
listed in its directory's manifest must have the listed size (and, with `checksum="sha256"`, the listed SHA-256);
one no manifest lists is read through as a tar. A missing, truncated, empty or replaced shard is refused at start-up
with an error naming it, not found by a data-loader worker hours later.

Streaming (`ShardStream`): the tars are read by our own reader (`read_tar_samples`, local or `hf://` paths) wrapped
as a `datasets` iterable dataset, which keeps each sample's image bytes whatever their format and its JSON
unparsed (datasets' `webdataset` loader infers one set of columns from the first samples, so a second image format
was dropped or refused, and one invalid JSON ended the stream); `split_dataset_by_node` gives each process a fixed,
disjoint set of shards (their number must be a multiple of the processes); `shuffle(seed, buffer_size)` and
`set_epoch` make the order a function of seed and epoch; in a `DataLoader`, `datasets` splits each process's shards
across the workers. Samples are decoded in the workers, exactly as the processors decode an image file
(`modeling_common.images.to_rgb_images`: 16-bit, palette, grey and transparent images included); a corrupt sample
(undecodable image, invalid JSON, no caption) is skipped and counted rather than ending the stream.

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
import fsspec
import torch
from braceexpand import braceexpand
from datasets.distributed import split_dataset_by_node
from datasets.packaged_modules.webdataset.webdataset import base_plus_ext
from PIL import Image
from tqdm.auto import tqdm

from ..fileio import sha256_file, sha256_stream
from ..modeling_common.images import to_rgb_images

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
CHECKSUMS = ("size", "sha256")  # what `verify_shards` compares with the manifest
SKIPPED = "__skipped__"  # key a streamed row carries: corrupt samples skipped just before it
RAW_FEATURES = datasets.Features({"__key__": datasets.Value("string"), "__url__": datasets.Value("string"),
                                  "image": datasets.Value("binary"), "json": datasets.Value("binary")})


def expand_shards(pattern: str) -> list[str]:
    """Brace expansion of a shard pattern (`path/{00000..00127}.tar`, comma lists, several patterns separated by
    `::`), local paths or `hf://` URLs."""
    return [url for part in pattern.split("::") for url in braceexpand(part.strip())]


class ShardError(ValueError):
    """A training shard that is missing, damaged or does not match its manifest (the message names it)."""


def _split_url(url: str) -> tuple[str, str]:
    """(directory, file name) of a local path or URL."""
    directory, _, name = url.rpartition("/")
    return directory or ".", name


def _manifest_entries(urls: Sequence[str]) -> dict[str, dict]:
    """The manifest entry of every shard of `urls` that the `manifest.json` beside it lists, by URL."""
    listed = {}
    for directory in {_split_url(url)[0] for url in urls}:
        fs, path = fsspec.core.url_to_fs(f"{directory}/{MANIFEST}")
        if fs.isfile(path):
            with fs.open(path, "rb") as handle:
                listed[directory] = {entry["name"]: entry for entry in json.load(handle)["shards"]}
    entries = {}
    for url in urls:
        directory, name = _split_url(url)
        if name in listed.get(directory, {}):
            entries[url] = listed[directory][name]
    return entries


def _verify_shard(url: str, entry: dict | None, checksum: str) -> int:
    """Samples of one shard, checked against its manifest `entry` (see `verify_shards`); ShardError otherwise."""
    fs, path = fsspec.core.url_to_fs(url)
    size = fs.size(path)
    if entry is None:
        if checksum == "sha256":
            raise ShardError(f"{url}: no {MANIFEST} beside it lists it, so its SHA-256 cannot be checked")
        with fs.open(path, "rb") as handle:
            handle.seek(max(0, size - 2 * tarfile.BLOCKSIZE))
            tail = handle.read()
        if size < 2 * tarfile.BLOCKSIZE or tail.strip(b"\0"):  # tarfile stops quietly at a truncated header
            raise ShardError(f"{url}: does not end with a tar's end-of-archive blocks (truncated, empty or not a tar)")
        count = sum(1 for _ in read_tar_samples(url, fields=False))
        if not count:
            raise ShardError(f"{url}: holds no sample")
        return count
    if size != entry["bytes"]:
        raise ShardError(f"{url}: {size} bytes, its manifest lists {entry['bytes']} (truncated, empty or replaced)")
    if checksum == "sha256":
        with fs.open(path, "rb") as handle:
            digest = sha256_stream(handle)
        if digest != entry["sha256"]:
            raise ShardError(f"{url}: SHA-256 {digest}, its manifest lists {entry['sha256']} (damaged or replaced)")
    return entry["samples"]


def verify_shards(urls: Sequence[str], checksum: str = "size") -> list[int]:
    """Check every shard before training and return the samples of each (from the manifest, else counted).

    A shard must exist; one listed in the `manifest.json` beside it must have the listed size (`checksum="sha256"`:
    and the listed SHA-256, reading every byte; a shard no manifest lists is then refused); one not listed must end
    with a tar's end-of-archive blocks and is read through. So an empty, truncated or non-tar shard is caught either
    way. Raises FileNotFoundError naming
    the missing shards, ShardError naming each one that fails and what was found."""
    if checksum not in CHECKSUMS:
        raise ValueError(f"checksum must be one of {CHECKSUMS}, got {checksum!r}")
    if not urls:
        raise FileNotFoundError("the shard pattern names no file")
    missing = [url for url in urls if not _is_file(url)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise FileNotFoundError(f"{len(missing)} of {len(urls)} training shards do not exist: {shown}")
    entries, counts, problems = _manifest_entries(urls), [], []
    for url in urls:
        try:
            counts.append(_verify_shard(url, entries.get(url), checksum))
        except ShardError as error:
            problems.append(str(error))
    if problems:
        shown = "\n  ".join(problems[:10]) + (f"\n  and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ShardError(f"{len(problems)} of {len(urls)} training shards fail verification:\n  {shown}")
    return counts


def _is_file(url: str) -> bool:
    fs, path = fsspec.core.url_to_fs(url)
    return fs.isfile(path)


def read_tar_samples(url: str, fields: bool = True):
    """The samples of one WebDataset tar in order, as (key, {extension: bytes}) (`fields=False`: empty dicts, the
    data skipped unread). Files are grouped by WebDataset's key rule (the name up to the first dot of its base name);
    a tar that cannot be read is a ShardError naming the shard and how far it got."""
    key, sample, count = None, {}, 0
    try:
        with datasets.utils.file_utils.xopen(url, "rb") as handle, tarfile.open(fileobj=handle, mode="r|") as tar:
            for member in tar:
                name_key, extension = base_plus_ext(member.name) if member.isfile() else (None, None)
                if name_key is None:
                    continue
                if name_key != key and key is not None:
                    yield key, sample
                    sample, count = {}, count + 1
                key = name_key
                if fields:
                    sample[extension.lower()] = tar.extractfile(member).read()
            if key is not None:
                yield key, sample
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ShardError(f"shard {url} cannot be read after {count} samples: {error}") from error


def _raw_samples(urls: list[str]):
    """`datasets` generator of the raw samples of `urls` (`RAW_FEATURES`: the image bytes of the first field PIL
    reads, whatever the format, and the JSON bytes unparsed), shard after shard."""
    extensions = {extension[1:].lower() for extension in Image.registered_extensions()}
    for url in urls:
        for key, fields in read_tar_samples(url):
            image = next((data for extension, data in fields.items() if extension in extensions), None)
            yield {"__key__": key, "__url__": url, "image": image, "json": fields.get("json")}


# ---------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------
def _usual_extension(image_format: str | None) -> str | None:
    """The file extension of a PIL image format, as the reader recognises it ("JPEG" -> "jpg", "PNG" -> "png");
    None for a format PIL registers no extension for."""
    if image_format == "JPEG":
        return "jpg"
    return next((ext[1:] for ext, name in Image.registered_extensions().items() if name == image_format), None)


def _image_bytes(image: dict | Image.Image) -> tuple[bytes, str]:
    """(bytes, extension) of an image cell: the source file's own bytes and format when it has them, else PNG (also
    for a format without a registered extension, re-encoded losslessly)."""
    if isinstance(image, dict):
        data = image["bytes"] or Path(image["path"]).read_bytes()
        image = Image.open(io.BytesIO(data))
        extension = _usual_extension(image.format)
        if extension is not None:
            return data, extension
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
    """The rows of WebDataset shards in our sample schema (`image`, decoded as the processors decode an image file,
    plus the JSON's fields), this process's share (`rank` of `world_size`), shuffled by `seed` and the epoch
    (`set_epoch`). The shards are verified first (`verify_shards` with `checksum`; `sample_counts` keeps what it
    returns). Corrupt samples (image bytes that do not decode, no image, JSON that does not parse or is not an
    object, no caption) are skipped, and the next row carries how many in `SKIPPED`. Resumable exactly per
    data-loader worker (`state_dict` / `load_state_dict`, see the module docstring)."""

    def __init__(self, urls: Sequence[str], rank: int = 0, world_size: int = 1, seed: int = 0,
                 buffer_size: int = 1000, text_column: str = "caption", checksum: str = "size"):
        if len(urls) % world_size:
            raise ValueError(f"{len(urls)} shards cannot be split evenly across {world_size} processes: use a "
                             f"multiple of {world_size} shards")
        self.sample_counts = verify_shards(urls, checksum)
        self.urls, self.rank, self.world_size = list(urls), rank, world_size
        self.seed, self.buffer_size, self.text_column = seed, buffer_size, text_column
        self.epoch, self._consumed, self._resume = 0, 0, 0
        stream = datasets.IterableDataset.from_generator(_raw_samples, features=RAW_FEATURES,
                                                         gen_kwargs={"urls": self.urls})
        stream = split_dataset_by_node(stream, rank, world_size)
        self._stream = stream.shuffle(seed=seed, buffer_size=buffer_size) if buffer_size > 1 else stream

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
        try:
            fields = json.loads(example["json"] or "null")
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            return None
        caption = fields.get(self.text_column) if isinstance(fields, dict) else None
        if example["image"] is None or not isinstance(caption, str) or not caption.strip():
            return None
        try:
            image = to_rgb_images(example["image"])[0]
        except Exception:  # noqa: BLE001 (any undecodable image is skipped and counted)
            return None
        return {**fields, "image": image, "__key__": example["__key__"]}

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
