"""Files in the real benchmarks' on-disk formats, written tiny for the loaders' and the evaluation's tests: images of
a distinct colour per index (so a decoded image tells which file it came from), corrupt and truncated images, JSON and
JSON Lines, Karpathy-split entries and HierarCaps rows."""

import csv
import io
import json
from pathlib import Path

from PIL import Image


def color(index: int) -> tuple[int, int, int]:
    """A distinct, JPEG-robust colour per index, so a decoded image tells which file it came from."""
    return ((index * 53) % 7 * 36, (index * 29) % 5 * 60, (index * 17) % 3 * 120)


def write_image(path: Path, index: int, fmt: str = "JPEG", size=(8, 6)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color(index)).save(path, fmt)
    return path


def write_corrupt(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00garbage, not an image\xff" * 8)
    return path


def write_truncated(path: Path) -> Path:
    """A JPEG whose header parses (Image.open succeeds) but whose data stops early (only load() fails)."""
    buffer = io.BytesIO()
    Image.effect_noise((64, 64), 60).convert("RGB").save(buffer, "JPEG", quality=95)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return path


def write_jsonl(path: Path, entries) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries), encoding="utf-8")
    return path


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def karpathy_image(index: int, split: str, filepath: str | None = None, count: int = 5) -> dict:
    entry = {"filename": f"img_{index:06d}.jpg", "imgid": index, "split": split, "sentid": list(range(count)),
             "sentences": [{"raw": f" caption {k} of image {index}. ", "tokens": ["caption"], "imgid": index,
                            "sentid": k} for k in range(count)]}
    if filepath is not None:
        entry.update(filepath=filepath, cocoid=1000 + index, filename=f"COCO_{filepath}_{index:012d}.jpg")
    return entry


HIERARCAPS_ROWS = [
    ("0", "table => table with plates => table with three plates, with man => A table with three plates.", 301718),
    ("1", "bird => blue bird => blue bird sitting on top of branch => A blue bird on a branch. It is autumn.", 100489),
    ("2", "bird => small bird => small bird on a branch => A small bird sits on the branch.", 100489),
    ("3", "cat => black cat => black cat on sofa => A black cat sleeps on a sofa.", 139),
]


def write_hierarcaps(path: Path, rows) -> Path:
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["id", "captions", "image_url"])
        for row_id, captions, coco_id in rows:
            url = f"http://images.cocodataset.org/val2014/COCO_val2014_{coco_id:012d}.jpg"
            writer.writerow([row_id, captions, url])
    return path
