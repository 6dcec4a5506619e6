"""COLA multi-object matching: image pairs with two captions each, a JSON list."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import datasets

from .records import _annotation, _build, _data_dir, _malformed, _read_json, _Record, _require_dir, _split, _text
from .registry import IMAGE, TEXT, Benchmark, PathLike, _register

COLA_JSONS = ("COLA_multiobjects_matching_benchmark.json", "cleaned_hardcontrastive_val_unique.json")


@_register("cola_multi", {"id": TEXT, "images": datasets.List(IMAGE, length=2),
                          "captions": datasets.List(TEXT, length=2)}, ("val",),
           "COLA multi-object matching: image pairs whose two captions swap attributes/objects",
           protocol="official", protocol_description="COLA's multi-object json with its Visual Genome images",
           layout="cola/                                        <- --data-dir\n"
                  "  COLA_multiobjects_matching_benchmark.json   (or cleaned_hardcontrastive_val_unique.json)\n"
                  "  images/<Visual Genome id>.jpg")
def load_cola_multi(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                    annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                    num_workers: int | None = None) -> Benchmark:
    """COLA multi-object setting: a JSON list of ``[image_1, caption_1, image_2, caption_2]`` where caption_1 applies
    to image_1 and not image_2 and vice versa; images are Visual Genome urls
    (``https://cs-people.bu.edu/array/data/vg_gqa_images/2414605.jpg``).

    Layout: ``data_dir/COLA_multiobjects_matching_benchmark.json`` (or ``cleaned_hardcontrastive_val_unique.json``,
    the same format under the name stored in the repo's ``data/``); images must be local: a url maps to
    ``image_root/<url basename>`` (``image_root`` defaulting to ``data_dir/images``, e.g. ``images/2414605.jpg``),
    a non-url entry is a path relative to ``image_root``. Rows: ``images`` (2) and ``captions`` (2), aligned; a pair
    with an unreadable image is skipped whole. The split is "val" (the file is COLA's validation set). Matches
    arijitray1993/COLA ``README.md`` and ``scripts/eval.py`` (``for image_1, caption_1, image_2, caption_2 in
    json.load(...)``, scored by ``ColaMultiObjAcc``).
    """
    what = f"COLA multi-object ({COLA_JSONS[0]}: JSON list of [image_1, caption_1, image_2, caption_2])"
    root = _data_dir(data_dir, what)
    split = _split(split, "cola_multi")
    path = _annotation(root, annotation_file, COLA_JSONS, what)
    images = _require_dir(root / (image_root if image_root is not None else "images"), f"{what} image directory")
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of [image_1, caption_1, image_2, caption_2]")

    def local(reference: str) -> Path:
        parsed = urlparse(reference)
        return images / (Path(parsed.path).name if parsed.scheme in ("http", "https") else reference)

    records = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, list) or len(entry) != 4:
            raise _malformed(path, index, f"expected [image_1, caption_1, image_2, caption_2], got {entry!r}")
        image_1, caption_1, image_2, caption_2 = (_text(value, path, index, key) for value, key in
                                                  zip(entry, ("image_1", "caption_1", "image_2", "caption_2")))
        records.append(_Record((local(image_1), local(image_2)),
                               {"id": str(index), "captions": [caption_1, caption_2]}))
    return _build("cola_multi", records, load_cola_multi.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)
