"""FLAIR's repackaged evaluation annotations (ExplainableML/flair ``datasets/``): one JSON object
``{"annotations": [{"image_id", "image", "caption"}, ...]}`` per benchmark, one entry per caption."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .records import (
    _annotation,
    _build,
    _caption_row,
    _data_dir,
    _field,
    _malformed,
    _read_json,
    _Record,
    _require_dir,
    _split,
    _text,
)
from .registry import BASE_FEATURES, TEXTS, Benchmark, PathLike

logger = logging.getLogger(__name__)

FLAIR_FEATURES = {**BASE_FEATURES, "captions": TEXTS}


def load_flair_annotations(name: str, protocol: str, data_dir: PathLike, split: str | None, max_samples: int | None,
                           default_annotation: str, annotation_file: PathLike | None, image_root: PathLike | None,
                           num_workers: int | None, load: Callable) -> Benchmark:
    """One row per ``image_id`` (in order of first appearance): ``image`` = ``image_root/<image>`` (default
    ``data_dir/images``), ``captions`` = its captions in file order, ``caption`` the first. As ExplainableML/flair
    ``src/flair/data.py`` (``read_urban1k_pairs`` / ``read_docci_pairs``: ``json.load(f)["annotations"]``, image =
    ``os.path.join(root_dir, "images", annotation["image"])``, captions verbatim, images grouped by ``image_id``).
    An empty caption (Urban1k's ``592.jpg`` in FLAIR's file) is kept, as FLAIR keeps it, with a warning."""
    what = f"{name} (FLAIR's {default_annotation}: {{\"annotations\": [{{image_id, image, caption}}]}})"
    root = _data_dir(data_dir, what)
    split = _split(split, name, protocol)
    path = _annotation(root, annotation_file, [default_annotation], what)
    images = _require_dir(root / (image_root if image_root is not None else "images"), f"{what} image directory")
    data = _read_json(path)
    entries = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON object with an 'annotations' list")
    groups: dict[object, tuple[str, list[str]]] = {}
    for index, entry in enumerate(entries):
        image_id = _field(entry, "image_id", path, index)
        image = _text(_field(entry, "image", path, index), path, index, "image")
        caption = _field(entry, "caption", path, index)
        if not isinstance(caption, str):
            raise _malformed(path, index, f"'caption' must be a string, got {caption!r}")
        if not caption.strip():
            logger.warning("%s: %s: the caption of %s (record %d) is empty; kept, as FLAIR's evaluation keeps it",
                           name, path, image, index)
        first_image, captions = groups.setdefault(image_id, (image, []))
        if first_image != image:
            raise _malformed(path, index, f"image_id {image_id!r} names {first_image!r} and {image!r}")
        captions.append(caption.strip())
    records = [_Record((images / image,), _caption_row(str(image_id), captions[0], captions=captions))
               for image_id, (image, captions) in groups.items()]
    return _build(name, records, load.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)
