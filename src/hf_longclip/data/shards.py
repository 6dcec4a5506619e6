"""Training data at the papers' scale: WebDataset tar shards, written once and streamed through `datasets`.

    write_shards(dataset, "shards/", shard_size=1000, num_workers=8)      # `hf-longclip shard` does this
    stream = ShardStream(expand_shards("shards/{00000..00127}.tar"), rank, world_size, seed=0, buffer_size=1000)

A shard is a POSIX tar of samples in WebDataset's convention: `<key>.<ext>` (the image: the source file's own bytes,
`ext` its format's usual extension, so one shard may mix PNG, JPEG, GIF, ...) and `<key>.json` (every other field of
the row in our sample schema: `caption`, `sentences`, `captions`, ...). `manifest.json` beside the shards lists each
shard's name, sample count, size and XXH3-128 hash (`fileio.xxh3_128`); writing is parallel (one process per shard),
atomic per shard, and a re-run skips shards that match it.

Verification (`verify_shards`, run by `ShardStream` before anything is streamed): every shard must exist; one
listed in its directory's manifest must have the listed size (and, with `checksum="xxh3_128"`, the listed hash);
one no manifest lists is read through as a tar. A missing, truncated, empty or replaced shard is refused at start-up
with an error naming it, not found by a data-loader worker hours later.

Streaming (`ShardStream`): the tars are read by our own reader (`read_tar_samples`, local or `hf://` paths) wrapped
as a `datasets` iterable dataset, which keeps each sample's image bytes whatever their format and its JSON
unparsed (datasets' `webdataset` loader infers one set of columns from the first samples, so a second image format
was dropped or refused, and one invalid JSON ended the stream); `split_dataset_by_node` gives each process a fixed,
disjoint set of shards (their number must be a multiple of the processes); `shuffle(seed, buffer_size)` and
`set_epoch` make the order a function of seed and epoch; in a `DataLoader`, `datasets` splits each process's shards
across the workers. Samples are decoded in the workers by `data.image_files.open_image`, exactly as the processors
decode an image file (`modeling_common.images.to_rgb_images`: 16-bit, palette, grey and transparent images
included; EXIF orientation applied; an animation's first frame); a corrupt sample (undecodable image, invalid JSON,
no caption) is skipped and counted rather than ending the stream (or, under the `error` policy, names it).

Writing verifies every sample first (`write_shards`): an image that does not decode in full, a missing file, a
missing or empty caption is skipped and counted by reason in the manifest (or, under the `error` policy, stops the
run naming the file and the sample id); control characters in captions are cleaned (`data.caption_files`).

Exact resume: `datasets` can checkpoint a stream but not the content of its shuffle buffer, so a resumed stream
would lose the buffered samples. Instead each worker counts the examples it has taken from its (deterministic)
stream in the current epoch (`state_dict`, which torchdata's `StatefulDataLoader` collects per worker) and a
resumed worker replays its stream from the epoch's start, skipping that many examples without decoding them: the
resumed run sees exactly the samples an uninterrupted run would, at the cost of re-reading the skipped bytes.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import tarfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import datasets
import fsspec
import torch
from datasets.distributed import split_dataset_by_node
from datasets.packaged_modules.webdataset.webdataset import base_plus_ext
from PIL import Image
from tqdm.auto import tqdm

from ..fileio import HASH, open_atomic, write_atomic, xxh3_128
from ..modeling_common.optional import require
from ..modeling_common.text import split_sentences
from .caption_files import check_utf8, clean_caption
from .image_files import (
    EMPTY_CAPTION,
    MISSING,
    NO_CAPTION,
    SkippedSamples,
    UnreadableImage,
    bad_sample_policy,
    decode_image,
    max_image_pixels,
    open_image,
)

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
CHECKSUMS = ("size", HASH)  # what `verify_shards` compares with the manifest
SKIPPED = "__skipped__"  # key a streamed row carries: corrupt samples skipped just before it
SHARD_PACKAGES = ("braceexpand", "torchdata")  # the extra `hf-longclip[shards]`: shard patterns, resumable loader
RAW_FEATURES = datasets.Features({"__key__": datasets.Value("string"), "__url__": datasets.Value("string"),
                                  "image": datasets.Value("binary"), "json": datasets.Value("binary")})


def expand_shards(pattern: str) -> list[str]:
    """Brace expansion of a shard pattern (`path/{00000..00127}.tar`, comma lists, several patterns separated by
    `::`), local paths or `hf://` URLs. Needs braceexpand (the extra `hf-longclip[shards]`)."""
    braceexpand = require("braceexpand", "shards", SHARD_PACKAGES, "streamed WebDataset shards").braceexpand
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
        if checksum == HASH:
            raise ShardError(f"{url}: no {MANIFEST} beside it lists it, so its {HASH} hash cannot be checked")
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
    if checksum == HASH:
        with fs.open(path, "rb") as handle:
            digest = xxh3_128(handle)
        if digest != entry[HASH]:
            raise ShardError(f"{url}: {HASH} {digest}, its manifest lists {entry[HASH]} (damaged or replaced)")
    return entry["samples"]


def verify_shards(urls: Sequence[str], checksum: str = "size") -> list[int]:
    """Check every shard before training and return the samples of each (from the manifest, else counted).

    A shard must exist; one listed in the `manifest.json` beside it must have the listed size (`checksum="xxh3_128"`:
    and the listed hash, reading every byte; a shard no manifest lists is then refused); one not listed must end
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
    for a format without a registered extension: the image as it is read, `data.image_files.open_image`). The image
    is decoded in full first (`decode_image`): UnreadableImage, naming the file and why, when it does not decode."""
    if image is None:
        raise UnreadableImage(MISSING, None, "the row names no image")
    if isinstance(image, dict):
        path = image.get("path")
        try:
            if image.get("bytes"):
                data = image["bytes"]
                image, image_format = decode_image(data)
            elif path:
                image, image_format = decode_image(path)
                data = Path(path).read_bytes()
            else:
                raise UnreadableImage(MISSING, None, "the row has neither image bytes nor a path")
        except UnreadableImage as error:
            error.source = error.source or path
            raise
        except OSError as error:  # removed or unreadable between the check and the read
            raise UnreadableImage(MISSING, path, str(error)) from None
        extension = _usual_extension(image_format)
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


def _sample_id(row: dict, position: int) -> str:
    """How a row is named in a skip or an error: its `id` column, else its position in the source."""
    value = row.get("id")
    return str(value) if value not in (None, "") else f"row {position}"


def _checked_caption(row: dict, text_column: str, sample_id: str, file: str | None,
                     skipped: SkippedSamples) -> bool | None:
    """Clean the row's caption in place (`clean_caption`; its `sentences` follow): True if it changed, False if not,
    None if it is missing or empty (counted in `skipped`, or an error under the `error` policy)."""
    if text_column not in row:
        return False
    caption = row[text_column]
    if not isinstance(caption, str):
        skipped.add(sample_id, NO_CAPTION, file, f"{text_column} is {caption!r:.40}")
        return None
    cleaned = clean_caption(caption)
    if not cleaned:
        skipped.add(sample_id, EMPTY_CAPTION, file, f"{text_column} is {caption!r:.40}")
        return None
    if cleaned == caption:
        return False
    row[text_column] = cleaned
    if isinstance(row.get("sentences"), list):
        row["sentences"] = split_sentences(cleaned)
    return True


def _write_shard(dataset: datasets.Dataset, index: int, start: int, stop: int, path: Path,
                 image_column: str, text_column: str = "caption", policy: str | None = None) -> dict:
    """Write rows [start, stop) as shard `path` (atomically: `fileio.open_atomic`); its manifest entry. A row whose
    image does not decode or whose caption is missing or empty is skipped and counted (`skipped` of the entry), or,
    under the `error` policy, a ValueError naming its file and id."""
    rows = dataset.select(range(start, stop)).cast_column(image_column, datasets.Image(decode=False))
    skipped, written, cleaned = SkippedSamples(policy, log=logger), 0, 0
    with open_atomic(path) as file, tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for offset, row in enumerate(rows):
            key = f"{index:05d}_{offset:06d}"
            cell = row.pop(image_column)
            file = cell.get("path") if isinstance(cell, dict) else None
            sample_id = _sample_id(row, start + offset)
            changed = _checked_caption(row, text_column, sample_id, file, skipped)
            if changed is None:
                continue
            try:
                data, extension = _image_bytes(cell)
            except UnreadableImage as error:
                skipped.add_error(sample_id, error)
                continue
            written, cleaned = written + 1, cleaned + changed
            fields = json.dumps(_jsonable(row), ensure_ascii=False).encode()
            for name, payload in ((f"{key}.{extension}", data), (f"{key}.json", fields)):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(payload), 0  # no timestamps: the same rows give the same bytes
                tar.addfile(info, io.BytesIO(payload))
    return {"name": path.name, "samples": written, "rows": stop - start, "skipped": skipped.summary(),
            "captions_cleaned": cleaned, "bytes": path.stat().st_size, HASH: xxh3_128(path)}



def write_shards(dataset: datasets.Dataset, output_dir: str | Path, shard_size: int = 1000, num_workers: int = 1,
                 image_column: str = "image", description: str = "", text_column: str = "caption",
                 bad_samples: str | None = None) -> Path:
    """Write `dataset` (rows in our sample schema) as `output_dir/{00000..}.tar` with `manifest.json`, `num_workers`
    processes writing shards in parallel, with a progress bar. Shards already listed in the manifest whose file
    still has the listed hash are kept (a re-run after a crash finishes the rest). Returns the manifest path.

    Every image is decoded in full before it is written (`data.image_files.decode_image`; its own bytes are what is
    written) and every `text_column` caption checked (control characters cleaned, `data.caption_files`). A sample
    whose image is missing, empty, truncated, not an image or too large, or whose caption is missing or empty,
    follows `bad_samples` (`data.image_files.bad_sample_policy`: default "skip", or `HF_LONGCLIP_BAD_SAMPLES`):
    "skip" leaves it out and counts it, by reason, in the manifest (`skipped`, per shard and in all; `num_samples`
    counts the samples written, `num_rows` the rows read), "error" stops with a ValueError naming its file and id."""
    policy = bad_sample_policy(bad_samples)
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
        reusable = old and old["rows"] == stop - start and (policy == "skip" or not old["skipped"]["count"])
        if reusable and path.is_file() and xxh3_128(path) == old[HASH]:
            entries[name] = old
        else:
            pending.append((index, start, stop, path))
    with tqdm(total=len(bounds), initial=len(entries), desc="writing shards") as progress:
        if num_workers <= 1:
            for index, start, stop, path in pending:
                entries[path.name] = _write_shard(dataset, index, start, stop, path, image_column, text_column,
                                                  policy)
                progress.update(1)
        else:
            with ProcessPoolExecutor(num_workers) as pool:
                futures = [pool.submit(_write_shard, dataset, index, start, stop, path, image_column, text_column,
                                       policy) for index, start, stop, path in pending]
                for future in as_completed(futures):
                    entry = future.result()
                    entries[entry["name"]] = entry
                    progress.update(1)
    shard_entries = [entries[name] for name in names]
    skipped = SkippedSamples(policy)
    for entry in shard_entries:
        skipped.merge(entry["skipped"])
    manifest = {"description": description, "num_samples": sum(entry["samples"] for entry in shard_entries),
                "num_rows": len(dataset), "skipped": skipped.summary(), "bad_samples": policy,
                "max_image_pixels": max_image_pixels(),
                "captions_cleaned": sum(entry["captions_cleaned"] for entry in shard_entries),
                "fields": dataset.column_names, "shards": shard_entries}
    write_atomic(manifest_path, json.dumps(manifest, indent=1))
    logger.info(f"{len(pending)} shard(s) written, {len(bounds) - len(pending)} kept, in {output_dir}: "
                f"{manifest['num_samples']} of {len(dataset)} samples, {skipped.describe()}, "
                f"{manifest['captions_cleaned']} caption(s) cleaned of control characters")
    return manifest_path


def _relative(file: str | None, root: Path) -> str:
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except (TypeError, ValueError, OSError):
        return str(file)


def _record_names(path: Path, count: int) -> list[str]:
    """`<file> line N` for each of the `count` records of a CSV (where each record starts) or JSON Lines file; `<file>
    row N` where the lines cannot be told."""
    text = path.read_text(encoding="utf-8-sig")
    lines = []
    if path.suffix == ".csv":
        reader = csv.reader(io.StringIO(text, newline=""))
        start = 1
        for record in reader:
            if record and any(field.strip() for field in record):
                lines.append(start)
            start = reader.line_num + 1
        lines = lines[1:]  # the header
    elif path.suffix == ".jsonl":
        lines = [number for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if len(lines) != count:
        return [f"{path.name} row {index + 1}" for index in range(count)]
    return [f"{path.name} line {line}" for line in lines]


def shard_source(source: str, data_dir: str | None = None, split: str | None = None,
                 max_samples: int | None = None) -> datasets.Dataset:
    """The rows `hf-longclip shard` writes: "synthetic" (the scenes; `data_dir` is their cache), a benchmark of
    `hf_longclip.data.benchmarks` (files under `data_dir`), a CSV / JSON Lines file with an `image` column of paths
    (relative to the file) and a `caption` column, or an image folder with a `metadata.csv` / `metadata.jsonl`
    (datasets' ImageFolder: `file_name` and `caption`)."""
    path = Path(source)
    if path.is_dir():
        for metadata in sorted(path.rglob("metadata.*")):
            if metadata.suffix in (".csv", ".jsonl", ".json") and metadata.is_file():
                check_utf8(metadata)  # datasets' error would name neither the file nor the line
        dataset = datasets.load_dataset("imagefolder", data_dir=str(path), split="train")
        if "id" not in dataset.column_names:  # a skipped or refused sample is named by its file
            files = [cell["path"] for cell in dataset.cast_column("image", datasets.Image(decode=False))["image"]]
            dataset = dataset.add_column("id", [_relative(file, path) for file in files])
    elif path.suffix in (".csv", ".jsonl", ".json"):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        check_utf8(path)
        dataset = datasets.load_dataset("csv" if path.suffix == ".csv" else "json", data_files=str(path),
                                        split="train")
        missing = {"image", "caption"} - set(dataset.column_names)
        if missing:
            raise ValueError(f"{path} needs the columns image (a path) and caption; missing {sorted(missing)}")
        dataset = dataset.map(lambda row: {"image": str(path.parent / row["image"]) if row["image"] else None})
        if "id" not in dataset.column_names:  # a skipped or refused sample is named by its line
            dataset = dataset.add_column("id", _record_names(path, len(dataset)))
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
    object, no caption; images read by `data.image_files.open_image`: EXIF orientation applied, first frame,
    the pixel limit) are skipped, logged with their reason, and the next row carries how many in `SKIPPED`; under
    the `error` policy (`bad_samples`, default `data.image_files.bad_sample_policy()`) the first one is a
    ValueError naming its shard, key and reason. Resumable exactly per data-loader worker (`state_dict` /
    `load_state_dict`, see the module docstring)."""

    def __init__(self, urls: Sequence[str], rank: int = 0, world_size: int = 1, seed: int = 0,
                 buffer_size: int = 1000, text_column: str = "caption", checksum: str = "size",
                 bad_samples: str | None = None):
        self.policy = bad_sample_policy(bad_samples)
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

    def _row(self, example: dict) -> dict | str:
        """Our schema's row for a raw example, or the reason it is corrupt."""
        try:
            fields = json.loads(example["json"] or "null")
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            return f"invalid JSON ({error})"
        if not isinstance(fields, dict):
            return "its JSON is not an object" if example["json"] else "no JSON"
        caption = fields.get(self.text_column)
        if not isinstance(caption, str):
            return NO_CAPTION
        if not caption.strip():
            return EMPTY_CAPTION
        if example["image"] is None:
            return "no image"
        try:
            image = open_image(example["image"])
        except UnreadableImage as error:
            return str(error)
        return {**fields, "image": image, "__key__": example["__key__"]}

    def __iter__(self):
        self._consumed, skipped = self._resume, 0
        for position, example in enumerate(self._stream):
            if position < self._resume:
                continue  # replaying to the resume point: not decoded
            self._consumed = position + 1
            row = self._row(example)
            if isinstance(row, str):
                if self.policy == "error":
                    raise ValueError(f"{example['__url__']}: sample {example['__key__']}: {row}; pass --bad-samples "
                                     f"skip (HF_LONGCLIP_BAD_SAMPLES=skip) to skip and count such samples instead")
                skipped += 1
                logger.warning(f"skipping corrupt sample {example['__key__']} of {example['__url__']}: {row}")
                continue
            row[SKIPPED], skipped = skipped, 0
            yield row
        self._resume = 0
