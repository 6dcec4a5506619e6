"""HierarCaps: 4-level caption hierarchies of COCO images, a CSV file."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import datasets

from .records import (
    _annotation,
    _build,
    _caption_row,
    _coco_id,
    _data_dir,
    _first_existing,
    _malformed,
    _read_csv,
    _Record,
    _require_dir,
    _split,
    _text,
)
from .registry import BASE_FEATURES, TEXT, Benchmark, PathLike, _register

HIERARCAPS_LEVELS = 4
HIERARCAPS_CSV = "hierarcaps_test.csv"
_TRAILING_ID = re.compile(r"_(\d+)")


@_register("hierarcaps", {**BASE_FEATURES, "levels": datasets.List(TEXT, length=HIERARCAPS_LEVELS),
                          "image_id": datasets.Value("int64")}, ("test",),
           "HierarCaps test: 1k COCO val2014 images with 4-level caption hierarchies", protocol="official",
           protocol_description="the TAU-VAILab/hierarcaps clone, or its files in one folder",
           layout="hierarcaps/                   <- --data-dir (the clone)\n  data/hierarcaps_test.csv\n"
                  "  assets/test_imgs/COCO_val2014_<12 digits>.jpg\n"
                  "or flat: hierarcaps_test.csv + test_imgs/ (or images/)")
def load_hierarcaps(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                    annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                    num_workers: int | None = None) -> Benchmark:
    """HierarCaps test set: ``data_dir/hierarcaps_test.csv`` with header ``id,captions,image_url``, ``captions`` =
    4 levels joined by ``=>`` (generic to specific), ``image_url`` a COCO url
    (``http://images.cocodataset.org/val2014/COCO_val2014_000000301718.jpg``).

    ``data_dir`` is the repository's clone (``data/hierarcaps_test.csv``, ``assets/test_imgs/``) or a folder holding
    the csv beside ``test_imgs/`` or ``images/``. Images must be local: the image directory (``image_root``, else
    the first of ``test_imgs``, ``images``, ``assets/test_imgs`` found) holds COCO files named ``..._<id>.jpg``; a
    row's image is the file whose trailing integer equals the integer after ``_`` in its url (so both the url
    basename and any ``<prefix>_<id>.<ext>`` name work). Rows: ``levels`` (the 4 stripped levels), ``caption`` = the
    most specific level, ``image_id`` = the COCO id (several rows share an image: the multi-reference evaluation
    groups on it).
    Matches TAU-VAILab/hierarcaps ``code/evaluation/hierarchical_retrieval.py`` (``HCEvaluator._load_data``:
    ``fn2id``, ``image_url.str.extract("_(\\d+)")``; ``row2texts``: ``[x.strip() for x in captions.split("=>")]``,
    asserting 4 levels) with the defaults of ``code/eval.py`` (``../data/hierarcaps_test.csv``,
    ``../assets/test_imgs``).
    """
    what = f"HierarCaps ({HIERARCAPS_CSV}: id,captions,image_url with captions 'a => b => c => d')"
    root = _data_dir(data_dir, what)
    split = _split(split, "hierarcaps")
    path = _annotation(root, annotation_file, [HIERARCAPS_CSV, f"data/{HIERARCAPS_CSV}"], what)
    if image_root is not None:
        images = _require_dir(root / image_root, f"{what} image directory")
    else:
        images = _first_existing([root / "test_imgs", root / "images", root / "assets" / "test_imgs"],
                                 f"{what} image directory", kind="dir")
    by_id = {}
    for file in sorted(images.iterdir()):
        coco_id = _coco_id(file.name)
        if coco_id is not None and file.is_file():
            by_id.setdefault(coco_id, file)
    records = []
    for line, row in _read_csv(path, ",", ("id", "captions", "image_url")):
        levels = [level.strip() for level in _text(row["captions"], path, line, "captions").split("=>")]
        if len(levels) != HIERARCAPS_LEVELS or not all(levels):
            raise _malformed(path, line, f"'captions' must hold {HIERARCAPS_LEVELS} non-empty levels joined by "
                                         f"'=>', got {len(levels)}: {row['captions']!r}")
        url = _text(row["image_url"], path, line, "image_url")
        match = _TRAILING_ID.search(Path(urlparse(url).path).name)
        if match is None:
            raise _malformed(path, line, f"no COCO image id ('_<digits>') in image_url {url!r}")
        coco_id = int(match.group(1))
        image = by_id.get(coco_id, images / Path(urlparse(url).path).name)
        record_id = _text(row["id"], path, line, "id")
        records.append(_Record((image,), _caption_row(record_id, levels[-1], levels=levels, image_id=coco_id)))
    return _build("hierarcaps", records, load_hierarcaps.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)
