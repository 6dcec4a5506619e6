"""MS-COCO and Flickr30k in Karpathy's split files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
from .registry import BASE_FEATURES, TEXTS, Benchmark, PathLike, _register

KARPATHY_SPLITS = ("test", "val", "train", "restval")


def _karpathy(name: str, data_dir: PathLike, split: str | None, max_samples: int | None, annotation_file,
              image_root, num_workers, default_json: str, default_images: Callable[[Path], Path],
              load: Callable, extra: Callable[[dict, Path, int], dict] | None = None) -> Benchmark:
    """The Karpathy-split rows; ``extra(entry, path, index)`` adds columns (of ``load.features``) to each row."""
    what = f"{name} Karpathy split ({default_json}: {{'images': [{{filename, split, sentences: [{{raw}}]}}]}})"
    root = _data_dir(data_dir, what)
    split = _split(split, name) if extra is None else split
    path = _annotation(root, annotation_file, [default_json], what)
    images = _require_dir(root / image_root if image_root is not None else default_images(root),
                          f"{what} image root")
    data = _read_json(path)
    entries = data.get("images") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON object with an 'images' list")
    wanted = {"train", "restval"} if split == "train" else {split}
    records = []
    for index, entry in enumerate(entries):
        if _field(entry, "split", path, index) not in wanted:
            continue
        filename = _text(_field(entry, "filename", path, index), path, index, "filename")
        if name == "coco":
            filename = f"{_text(_field(entry, 'filepath', path, index), path, index, 'filepath')}/{filename}"
        sentences = _field(entry, "sentences", path, index)
        if not isinstance(sentences, list) or not sentences:
            raise _malformed(path, index, "'sentences' must be a non-empty list of {'raw': caption}")
        captions = [_text(_field(sentence, "raw", path, index), path, index, "raw") for sentence in sentences]
        record_id = str(entry.get("cocoid", entry.get("imgid", Path(filename).stem)))
        row = _caption_row(record_id, captions[0], captions=captions)
        if extra is not None:
            row.update(extra(entry, path, index))
        records.append(_Record((images / filename,), row))
    return _build(name, records, load.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)


@_register("coco", {**BASE_FEATURES, "captions": TEXTS}, KARPATHY_SPLITS,
           "MS-COCO 2014, Karpathy split (test: 5k images, 5+ captions each)")
def load_coco(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
              annotation_file: PathLike | None = None, image_root: PathLike | None = None,
              num_workers: int | None = None) -> Benchmark:
    """MS-COCO Karpathy split: ``data_dir/dataset_coco.json`` = ``{"images": [{"filepath": "val2014", "filename",
    "cocoid", "split": train|val|test|restval, "sentences": [{"raw": caption, ...}, ...]}, ...]}``.

    Images at ``image_root/<filepath>/<filename>`` (``image_root`` defaults to ``data_dir``, e.g.
    ``data_dir/val2014/COCO_val2014_000000391895.jpg``). ``captions`` are every ``raw`` sentence (stripped; 5 for
    most images, a few have more: slice ``[:5]`` for the 25k-text protocol), ``caption`` the first. Splits: "test"
    (default, 5000 images), "val", "train" (train + restval, the usual 113k) and "restval". This is the
    ``caption_datasets.zip`` format of Karpathy's NeuralTalk (cs.stanford.edu/people/karpathy/deepimagesent),
    read as e.g. BLIP/ALBEF-style Karpathy loaders do (``os.path.join(filepath, filename)``, ``s["raw"]``).
    Long-CLIP / HiMo-CLIP / TULIP ``eval/coco.py`` instead read ``captions_val2017.json`` with torchvision
    ``CocoCaptions`` (5k val2017 images, ``captions[0:5]``); that set is not this loader's.
    """
    return _karpathy("coco", data_dir, split, max_samples, annotation_file, image_root, num_workers,
                     "dataset_coco.json", lambda root: root, load_coco)


@_register("flickr30k", {**BASE_FEATURES, "captions": TEXTS}, KARPATHY_SPLITS,
           "Flickr30k, Karpathy split (test: 1k images, 5 captions each)")
def load_flickr30k(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                   annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                   num_workers: int | None = None) -> Benchmark:
    """Flickr30k Karpathy split: ``data_dir/dataset_flickr30k.json`` = ``{"images": [{"filename", "imgid",
    "split": train|val|test, "sentences": [{"raw": caption, ...}, ...]}, ...]}`` (no ``filepath``).

    Images at ``image_root/<filename>``, ``image_root`` defaulting to ``data_dir/flickr30k-images`` when that
    directory exists, else ``data_dir``. ``captions`` = the 5 ``raw`` sentences, ``caption`` the first; splits as
    for COCO, default "test" (1000 images). Format of Karpathy's ``caption_datasets.zip``; Long-CLIP / HiMo-CLIP
    ``eval/retrieval/flickr30k.py`` read the same 1k test images from a ``results_20130124.token``-style
    ``image#n<TAB>caption`` file (``test_1k.txt``) instead, not supported here.
    """
    def default_images(root: Path) -> Path:
        return root / "flickr30k-images" if (root / "flickr30k-images").is_dir() else root

    return _karpathy("flickr30k", data_dir, split, max_samples, annotation_file, image_root, num_workers,
                     "dataset_flickr30k.json", default_images, load_flickr30k)
