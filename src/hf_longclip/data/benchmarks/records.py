"""What every loader shares: locating files, reading JSON / JSON-lines / CSV records with errors naming the file and
the record, and verifying the images before building the `Benchmark`."""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from ...modeling_common.text import split_sentences
from ..image_files import MISSING, SkippedSamples, UnreadableImage, decode_image
from .registry import BENCHMARKS, Benchmark, PathLike

logger = logging.getLogger(__name__)


@dataclass
class _Record:
    """One parsed annotation record: its image path(s) and its row without the image column(s)."""

    images: tuple[Path, ...]
    row: dict[str, Any]


def _require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(f"{what}: directory not found: {path}")
    return path


def _require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{what}: file not found: {path}")
    return path


def _first_existing(candidates: Sequence[Path], what: str, kind: str = "file") -> Path:
    check = Path.is_file if kind == "file" else Path.is_dir
    for candidate in candidates:
        if check(candidate):
            return candidate
    expected = " or ".join(str(candidate) for candidate in candidates)
    raise FileNotFoundError(f"{what}: {'file' if kind == 'file' else 'directory'} not found, tried: {expected}")


def _data_dir(data_dir: PathLike, what: str) -> Path:
    return _require_dir(Path(data_dir), what)


def _annotation(data_dir: Path, override: PathLike | None, defaults: Sequence[str], what: str) -> Path:
    if override is not None:
        return _require_file(data_dir / override, what)
    return _first_existing([data_dir / name for name in defaults], what)


def _split(split: str | None, name: str, protocol: str | None = None) -> str:
    """``split`` checked against the splits of benchmark ``name``'s ``protocol`` (default: the first); None: the
    first split."""
    splits = BENCHMARKS[name].protocol(protocol).splits
    if split is None:
        return splits[0]
    if split not in splits:
        raise ValueError(f"{name}: unknown split {split!r}; expected one of {', '.join(splits)}")
    return split


def _malformed(path: Path, record: Any, problem: str) -> ValueError:
    return ValueError(f"{path}: malformed record {record}: {problem}")


def _text(value: Any, path: Path, record: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _malformed(path, record, f"{key!r} must be a non-empty string, got {value!r}")
    return value.strip()


def _field(entry: Any, key: str, path: Path, record: Any) -> Any:
    if not isinstance(entry, dict):
        raise _malformed(path, record, f"expected a JSON object, got {type(entry).__name__}")
    if key not in entry:
        raise _malformed(path, record, f"missing key {key!r} (has {', '.join(map(repr, entry)) or 'no keys'})")
    return entry[key]


def _read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8-sig") as file:
            return json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON: {error}") from error


def _read_json_lines(path: Path) -> list[tuple[str, Any]]:
    """(``line N``, object) for each non-blank line of a JSON-lines file (a whole-file JSON array is accepted too)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text: {error}") from error
    if text.lstrip().startswith("["):
        try:
            return [(f"{index}", entry) for index, entry in enumerate(json.loads(text))]
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON: {error}") from error
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: malformed record line {number}: not valid JSON: {error}") from error
    return entries


def _read_csv(path: Path, delimiter: str, columns: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """(``line N``, row) for each data row of a CSV with a header row holding ``columns``."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as file:
            reader = csv.DictReader(file, delimiter=delimiter)
            header = reader.fieldnames or []
            missing = [column for column in columns if column not in header]
            if missing:
                raise ValueError(f"{path}: header {header} lacks column(s) {missing}; expected a header row with "
                                 f"{list(columns)} separated by {delimiter!r}")
            rows = []
            for row in reader:
                line = f"line {reader.line_num}"
                if None in row or any(row[column] is None for column in columns):
                    raise _malformed(path, line, f"expected {len(header)} {delimiter!r}-separated fields")
                rows.append((line, row))
            return rows
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text: {error}") from error
    except csv.Error as error:
        raise ValueError(f"{path}: malformed CSV: {error}") from error


def _caption_row(record_id: str, caption: str, **extra) -> dict[str, Any]:
    return {"id": record_id, "caption": caption, "sentences": split_sentences(caption), **extra}


def _check_image(path: Path) -> UnreadableImage | None:
    """None if the file decodes in full as the library reads images (`data.image_files.decode_image`: EXIF
    orientation, first frame, the pixel limit), else the UnreadableImage saying why (`reason` "missing file" when it
    does not exist)."""
    try:
        decode_image(path)
    except UnreadableImage as error:
        return error
    return None


def _build(name: str, records: Sequence[_Record], features: datasets.Features, *, split: str, source: Path,
           image_root: Path, max_samples: int | None, num_workers: int | None) -> Benchmark:
    """Verify the records' images in order until ``max_samples`` rows are readable, then build the dataset."""
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be a positive integer or None, got {max_samples}")
    workers = num_workers or min(8, os.cpu_count() or 1)
    verdicts: dict[Path, UnreadableImage | None] = {}  # images shared by several records are decoded once
    rows, skipped_paths, missing = [], [], []
    skipped = SkippedSamples(what="record", log=logger)  # the policy: skip and count, or error naming the record
    target = len(records) if max_samples is None else max_samples
    start, chunk = 0, max(64, 4 * workers)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while start < len(records) and len(rows) < target:
            batch = records[start:start + max(chunk, target - len(rows))]
            start += len(batch)
            todo = list(dict.fromkeys(p for record in batch for p in record.images if p not in verdicts))
            verdicts.update(zip(todo, pool.map(_check_image, todo)))
            for record in batch:
                bad = [(p, verdicts[p]) for p in record.images if verdicts[p] is not None]
                if bad:
                    path, error = bad[0]
                    skipped.add(f"{record.row.get('id')} of {name}", error.reason, str(path), error.detail)
                    skipped_paths.append(str(path))
                    missing.append(error.reason == MISSING)
                    continue
                row = dict(record.row)
                images = [{"path": str(p), "bytes": None} for p in record.images]
                if "images" in features:
                    row["images"] = images
                else:
                    row["image"] = images[0]
                rows.append(row)
                if len(rows) == target:
                    break
    if records and not rows and all(missing):
        raise FileNotFoundError(f"{name}: none of the images referenced by {source} exist under {image_root} "
                                f"(first expected: {skipped_paths[0]})")
    if skipped_paths:
        logger.warning("%s: skipped %d record(s) with unreadable images", name, len(skipped_paths))
    info = datasets.DatasetInfo(description=f"{name} ({split}) from {source}", features=features)
    columns = {column: [row[column] for row in rows] for column in features}  # keeps the columns when empty
    dataset = datasets.Dataset.from_dict(columns, features=features, info=info, split=datasets.NamedSplit(split))
    return Benchmark(name=name, dataset=dataset, num_skipped=len(skipped_paths), split=split, source=str(source),
                     skipped_paths=skipped_paths, skipped=skipped.summary())


def _coco_id(filename: str) -> int | None:
    """HierarCaps' ``fn2id``: the integer after the last ``_`` of the file stem (COCO_val2014_000000000139 -> 139)."""
    tail = Path(filename).stem.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None
