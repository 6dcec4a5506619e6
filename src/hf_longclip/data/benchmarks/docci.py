"""DOCCI and HiMo-Docci (DOCCI's test images with cumulative caption prefixes): JSON lines."""

from __future__ import annotations

from pathlib import Path

from .flair import FLAIR_FEATURES, load_flair_annotations
from .records import (
    _annotation,
    _build,
    _caption_row,
    _data_dir,
    _field,
    _first_existing,
    _malformed,
    _read_json_lines,
    _Record,
    _require_dir,
    _require_file,
    _split,
    _text,
)
from .registry import BASE_FEATURES, TEXTS, Benchmark, PathLike, _protocol, _register

DOCCI_RELEASE = "docci_descriptions.jsonlines"
DOCCI_TEST_SET = "test_set.jsonl"


@_register("docci", BASE_FEATURES, ("test", "train", "qual_dev", "qual_test"),
           "DOCCI: detailed human descriptions; test = the 5000-image test split", protocol="official",
           protocol_description="DOCCI's release, or HiMo-CLIP's test_set.jsonl (its evaluation)",
           layout="docci/                          <- --data-dir\n"
                  "  docci_descriptions.jsonlines   the release (or test_set.jsonl: HiMo-CLIP's test records)\n"
                  "  images/<example_id>.jpg        docci_images.tar.gz extracted")
def load_docci(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
               annotation_file: PathLike | None = None, image_root: PathLike | None = None,
               num_workers: int | None = None) -> Benchmark:
    """DOCCI: JSON lines with ``image_file`` and ``description``; images at ``data_dir/images/<image_file>``.

    Two layouts are accepted. The official release ``docci_descriptions.jsonlines`` (records ``example_id``,
    ``split`` in train / test / qual_dev / qual_test, ``image_file``, ``description``; images from
    ``docci_images.tar.gz`` extracted to ``images/``) is filtered on ``split`` (default "test", 5000 images), as the
    google/docci Hugging Face loader does. The HiMo-CLIP layout ``test_set.jsonl`` (the test records only, same
    fields) is used first when present and the split is "test"; it matches UnicomAI/HiMo-CLIP
    ``eval/retrieval/docci.py`` (``data/docci/test_set.jsonl``, ``info["description"].strip()``,
    ``os.path.join("data/docci/images", info["image_file"])``). ``annotation_file`` names another file in either
    layout (records with a ``split`` field are filtered on it).
    """
    what = f"DOCCI ({DOCCI_RELEASE} or {DOCCI_TEST_SET}: JSON lines with image_file, description)"
    root = _data_dir(data_dir, what)
    split = _split(split, "docci")
    if annotation_file is not None:
        path = _require_file(root / annotation_file, what)
    elif split == "test":
        path = _first_existing([root / DOCCI_TEST_SET, root / DOCCI_RELEASE], what)
    else:
        path = _require_file(root / DOCCI_RELEASE, what)
    images = _require_dir(root / (image_root if image_root is not None else "images"), f"{what} image directory")
    records = []
    for line, entry in _read_json_lines(path):
        image = _text(_field(entry, "image_file", path, line), path, line, "image_file")
        caption = _text(_field(entry, "description", path, line), path, line, "description")
        if "split" in entry:
            if entry["split"] != split:
                continue
        elif path.name == DOCCI_RELEASE:
            raise _malformed(path, line, "missing key 'split'")
        record_id = str(entry.get("example_id", Path(image).stem))
        records.append(_Record((images / image,), _caption_row(record_id, caption)))
    return _build("docci", records, load_docci.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)


HIMO_DOCCI_JSON = "himo_docci_data.json"


@_register("himo_docci", {**BASE_FEATURES, "subtexts": TEXTS}, ("test",),
           "HiMo-Docci: DOCCI test images with cumulative caption prefixes (HiMo@K)", protocol="himo",
           protocol_description="HiMo-CLIP's eval/text_mono/himo_docci_data.json beside DOCCI's images",
           layout="docci/                      <- --data-dir\n  himo_docci_data.json       JSON lines despite the "
                  "name\n  images/<example_id>.jpg")
def load_himo_docci(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                    annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                    num_workers: int | None = None) -> Benchmark:
    """HiMo-Docci: JSON lines ``{"img_path", "caption": [cumulative prefixes, shortest first], "raw_caption"}``.

    Layout: ``data_dir/himo_docci_data.json`` (JSON lines despite the name) and images at
    ``data_dir/images/<img_path>`` (the DOCCI image directory, so ``data_dir`` can be DOCCI's). ``subtexts`` are
    the ``caption`` prefixes verbatim; ``caption`` is ``raw_caption`` (the full DOCCI description; it can differ in
    spacing/quotes from the last prefix) or, without it, the last prefix. Matches UnicomAI/HiMo-CLIP
    ``eval/text_mono/get_himo.py`` (``load_jsonl("./himo_docci_data.json")``, image =
    ``os.path.join("data/docci/images/", ele["img_path"])``, prefixes = ``ele["caption"]``) and the released
    ``eval/text_mono/himo_docci_data.json``.
    """
    what = f"HiMo-Docci ({HIMO_DOCCI_JSON}: JSON lines with img_path, caption list, raw_caption)"
    root = _data_dir(data_dir, what)
    split = _split(split, "himo_docci")
    path = _annotation(root, annotation_file, [HIMO_DOCCI_JSON], what)
    images = _require_dir(root / (image_root if image_root is not None else "images"), f"{what} image directory")
    records = []
    for line, entry in _read_json_lines(path):
        image = _text(_field(entry, "img_path", path, line), path, line, "img_path")
        prefixes = _field(entry, "caption", path, line)
        if not isinstance(prefixes, list) or not prefixes:
            raise _malformed(path, line, f"'caption' must be a non-empty list of prefixes, got {prefixes!r}")
        subtexts = [_text(prefix, path, line, "caption[]") for prefix in prefixes]
        raw = entry.get("raw_caption")
        caption = _text(raw, path, line, "raw_caption") if raw is not None else subtexts[-1]
        records.append(_Record((images / image,), _caption_row(Path(image).stem, caption, subtexts=subtexts)))
    return _build("himo_docci", records, load_himo_docci.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)


@_protocol("docci", "flair", FLAIR_FEATURES, ("test",),
           "docci/                               <- --data-dir\n  images/test_<n>.jpg\n"
           "  annotations/test_annotations.json    {\"annotations\": [{\"image_id\", \"image\", \"caption\"}]}",
           "FLAIR's fine-grained captions of the 5k test images (ExplainableML/flair datasets/docci)")
def load_docci_flair(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                     annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                     num_workers: int | None = None) -> Benchmark:
    """DOCCI as FLAIR's fine-grained retrieval reads it: ``data_dir/annotations/test_annotations.json`` (copied
    from ExplainableML/flair ``datasets/docci/annotations/``; several captions per ``image_id``) and DOCCI's images
    in ``data_dir/images/``; read as `load_flair_annotations` (``read_docci_pairs`` of ``src/flair/data.py``)."""
    return load_flair_annotations("docci", "flair", data_dir, split, max_samples, "annotations/test_annotations.json",
                                  annotation_file, image_root, num_workers, load_docci_flair)
