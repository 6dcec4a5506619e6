"""MS-COCO and Flickr30k: Karpathy's split files (default protocol), the files the Long-CLIP / HiMo-CLIP / TULIP
evaluation reads (COCO 2017 val captions, a Flickr30k token file), and FLAIR's repackaged annotations."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from .records import (
    _annotation,
    _build,
    _caption_row,
    _data_dir,
    _field,
    _first_existing,
    _malformed,
    _read_json,
    _Record,
    _require_dir,
    _split,
    _text,
)
from .registry import BASE_FEATURES, TEXTS, Benchmark, PathLike, _protocol, _register

logger = logging.getLogger(__name__)

KARPATHY_SPLITS = ("test", "val", "train", "restval")
CAPTIONS_FEATURES = {**BASE_FEATURES, "captions": TEXTS}
COCO_CAPTIONS_JSON = "annotations/captions_val2017.json"
FLICKR_TOKEN_FILES = ("test_1k.txt", "results_20130124.token")  # HiMo-CLIP's file name first, then Long-CLIP's
FLICKR_KAGGLE_CSV = "results.csv"  # the Kaggle Flickr30k release TULIP reads
LONGCLIP_CAPTIONS_PER_IMAGE = 5  # the Long-CLIP evaluation pairs caption i with image i // 5


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


@_register("coco", CAPTIONS_FEATURES, KARPATHY_SPLITS,
           "MS-COCO 2014, Karpathy split (test: 5k images, 5+ captions each)",
           protocol="karpathy", protocol_description="Karpathy's caption_datasets.zip splits (test: 5k val2014 images)",
           layout="coco/                  <- --data-dir\n  dataset_coco.json    Karpathy's split file\n"
                  "  val2014/COCO_val2014_<12 digits>.jpg\n  train2014/...       only for the train splits")
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
    ``CocoCaptions`` (5k val2017 images, ``captions[0:5]``): protocol "longclip", `load_coco_val2017`.
    """
    return _karpathy("coco", data_dir, split, max_samples, annotation_file, image_root, num_workers,
                     "dataset_coco.json", lambda root: root, load_coco)


@_register("flickr30k", CAPTIONS_FEATURES, KARPATHY_SPLITS,
           "Flickr30k, Karpathy split (test: 1k images, 5 captions each)",
           protocol="karpathy", protocol_description="Karpathy's caption_datasets.zip splits (test: 1k images)",
           layout="flickr30k/               <- --data-dir\n  dataset_flickr30k.json  Karpathy's split file\n"
                  "  flickr30k-images/<id>.jpg   (or the images directly in --data-dir)")
def load_flickr30k(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                   annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                   num_workers: int | None = None) -> Benchmark:
    """Flickr30k Karpathy split: ``data_dir/dataset_flickr30k.json`` = ``{"images": [{"filename", "imgid",
    "split": train|val|test, "sentences": [{"raw": caption, ...}, ...]}, ...]}`` (no ``filepath``).

    Images at ``image_root/<filename>``, ``image_root`` defaulting to ``data_dir/flickr30k-images`` when that
    directory exists, else ``data_dir``. ``captions`` = the 5 ``raw`` sentences, ``caption`` the first; splits as
    for COCO, default "test" (1000 images). Format of Karpathy's ``caption_datasets.zip``; Long-CLIP / HiMo-CLIP
    ``eval/retrieval/flickr30k.py`` read a 1k test set from a ``results_20130124.token``-style
    ``image#n<TAB>caption`` file (``test_1k.txt``) instead: protocol "longclip", `load_flickr30k_token`.
    """
    def default_images(root: Path) -> Path:
        return root / "flickr30k-images" if (root / "flickr30k-images").is_dir() else root

    return _karpathy("flickr30k", data_dir, split, max_samples, annotation_file, image_root, num_workers,
                     "dataset_flickr30k.json", default_images, load_flickr30k)


def _five_per_image(pairs: list[tuple[str, str, str]], path: Path, images: Path) -> list[_Record]:
    """One record per image of ``(record, image file, caption)`` lines, which come in consecutive runs of
    `LONGCLIP_CAPTIONS_PER_IMAGE` per image: the Long-CLIP-style evaluation pairs caption ``i`` with image
    ``i // 5``, so any other grouping is an error here rather than a silent mispairing."""
    groups: dict[str, list[str]] = {}
    previous = None
    for record, image, caption in pairs:
        if image in groups and image != previous:
            raise _malformed(path, record, f"the captions of {image} are not consecutive")
        groups.setdefault(image, []).append(caption)
        previous = image
    if not groups:
        raise ValueError(f"{path}: no caption lines")
    records = []
    for image, captions in groups.items():
        if len(captions) != LONGCLIP_CAPTIONS_PER_IMAGE:
            raise _malformed(path, image, f"{len(captions)} caption lines, expected {LONGCLIP_CAPTIONS_PER_IMAGE}")
        records.append(_Record((images / image,), _caption_row(Path(image).stem, captions[0], captions=captions)))
    return records


def _coco_val2017(protocol: str, data_dir: PathLike, split: str | None, max_samples: int | None, annotation_file,
                  image_root, num_workers, default_images: str, max_captions: int | None, load: Callable) -> Benchmark:
    """COCO captions json rows: one per image of ``images`` in ascending id order (torchvision ``CocoCaptions``:
    ``sorted(coco.imgs.keys())``), ``captions`` = its ``annotations`` in file order (the ``getAnnIds`` order), the
    first ``max_captions`` when given."""
    what = (f"MS-COCO captions ({COCO_CAPTIONS_JSON}: {{images: [{{id, file_name}}], "
            f"annotations: [{{image_id, caption}}]}})")
    root = _data_dir(data_dir, what)
    split = _split(split, "coco", protocol)
    path = _annotation(root, annotation_file, [COCO_CAPTIONS_JSON], what)
    images = _require_dir(root / (image_root if image_root is not None else default_images), f"{what} image directory")
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not isinstance(
            data.get("annotations"), list):
        raise ValueError(f"{path}: expected a JSON object with 'images' and 'annotations' lists (a COCO captions file)")
    files = {}
    for index, entry in enumerate(data["images"]):
        files[_field(entry, "id", path, f"images[{index}]")] = _text(
            _field(entry, "file_name", path, f"images[{index}]"), path, f"images[{index}]", "file_name")
    captions: dict[object, list[str]] = {image_id: [] for image_id in files}
    for index, entry in enumerate(data["annotations"]):
        record = f"annotations[{index}]"
        image_id = _field(entry, "image_id", path, record)
        if image_id not in captions:
            raise _malformed(path, record, f"image_id {image_id!r} is not among the file's images")
        captions[image_id].append(_text(_field(entry, "caption", path, record), path, record, "caption"))
    records = []
    for image_id in sorted(files):
        texts = captions[image_id][:max_captions]
        if not texts:
            raise _malformed(path, f"image {image_id}", "no caption annotates this image")
        records.append(_Record((images / files[image_id],), _caption_row(str(image_id), texts[0], captions=texts)))
    return _build("coco", records, load.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)


@_protocol("coco", "longclip", CAPTIONS_FEATURES, ("val2017",),
           "coco/                              <- --data-dir\n  val2017/<12 digits>.jpg            5,000 images\n"
           "  annotations/captions_val2017.json",
           "the 5k val2017 images, 5 captions each: Long-CLIP's, HiMo-CLIP's and TULIP's evaluation")
def load_coco_val2017(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                      annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                      num_workers: int | None = None) -> Benchmark:
    """MS-COCO 2017 val as Long-CLIP, HiMo-CLIP and TULIP score it: ``data_dir/annotations/captions_val2017.json``
    and ``data_dir/val2017/`` (``image_root`` overrides the image directory), 5,000 images, the first 5 captions of
    each in file order (25,000 texts). Matches beichenzbc/Long-CLIP ``eval/retrieval/coco.py`` (torchvision
    ``CocoCaptions(root="data/coco/val2017/", annFile="data/coco/annotations/captions_val2017.json")``,
    ``captions[0:5]``), the same in UnicomAI/HiMo-CLIP ``eval/retrieval/coco.py`` and ivonajdenkoska/tulip
    ``eval/coco.py``."""
    return _coco_val2017("longclip", data_dir, split, max_samples, annotation_file, image_root, num_workers,
                         "val2017", LONGCLIP_CAPTIONS_PER_IMAGE, load_coco_val2017)


@_protocol("coco", "flair", CAPTIONS_FEATURES, ("val2017",),
           "coco/                              <- --data-dir\n  images/val2017/<12 digits>.jpg\n"
           "  annotations/captions_val2017.json",
           "the 5k val2017 images with all 25,014 captions: FLAIR's evaluation")
def load_coco_flair(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                    annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                    num_workers: int | None = None) -> Benchmark:
    """MS-COCO 2017 val as FLAIR scores it: ``data_dir/annotations/captions_val2017.json`` and
    ``data_dir/images/val2017/``, every caption of each image kept (25,014 texts). Matches ExplainableML/flair
    ``src/flair/data.py`` ``read_coco_pairs`` (``os.path.join(root_dir, "images", "val2017")``, one text per
    annotation) and its ``datasets/EVAL_DATASETS.md`` tree."""
    return _coco_val2017("flair", data_dir, split, max_samples, annotation_file, image_root, num_workers,
                         "images/val2017", None, load_coco_flair)


@_protocol("flickr30k", "longclip", CAPTIONS_FEATURES, ("test",),
           "flickr/                       <- --data-dir\n  test_1k.txt                 <image>.jpg#<n><TAB><caption>, "
           "5 lines per image\n  flickr30k-images/<image>.jpg",
           "a 1k test file of image#n<TAB>caption lines: Long-CLIP's and HiMo-CLIP's evaluation")
def load_flickr30k_token(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                         annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                         num_workers: int | None = None) -> Benchmark:
    """Flickr30k as Long-CLIP and HiMo-CLIP score it: a token file of ``<image>#<n><TAB><caption>`` lines
    (``data_dir/test_1k.txt``, else Long-CLIP's ``results_20130124.token``; ``annotation_file`` names another) and
    images in ``data_dir/flickr30k-images/`` (``image_root`` overrides it). Consecutive lines of one image form one
    row (``captions`` in file order); the image name is the first field without its ``#<n>`` suffix. Matches
    UnicomAI/HiMo-CLIP ``eval/retrieval/flickr30k.py`` (``data/flickr/test_1k.txt``, ``data.split("\t")``, image
    ``split("\t")[0][:-2]`` of every 5th line, caption ``i`` belongs to image ``i // 5``) and beichenzbc/Long-CLIP
    ``eval/retrieval/flickr30k.py`` (the same reading of ``data/flickr/results_20130124.token``); an image whose
    lines are not consecutive, or a count other than 5, would break their ``i // 5`` pairing and is an error here."""
    what = f"Flickr30k token file ({' or '.join(FLICKR_TOKEN_FILES)}: <image>#<n><TAB><caption> lines)"
    root = _data_dir(data_dir, what)
    split = _split(split, "flickr30k", "longclip")
    path = _annotation(root, annotation_file, FLICKR_TOKEN_FILES, what)
    images = _require_dir(root / (image_root if image_root is not None else "flickr30k-images"),
                          f"{what} image directory")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text: {error}") from error
    pairs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        name, tab, caption = line.partition("\t")
        image, hash_mark, index = name.strip().rpartition("#")
        if not tab or not hash_mark or not index.isdigit() or not image:
            raise _malformed(path, f"line {number}", f"expected '<image>#<n><TAB><caption>', got {line[:80]!r}")
        pairs.append((f"line {number}", image, _text(caption, path, f"line {number}", "caption")))
    records = _five_per_image(pairs, path, images)
    return _build("flickr30k", records, load_flickr30k_token.features, split=split, source=path,
                  image_root=images, max_samples=max_samples, num_workers=num_workers)


@_protocol("flickr30k", "flair", CAPTIONS_FEATURES, ("val", "test", "train"),
           "flickr30k-images/              <- --data-dir\n  flickr30k_test.json         [{\"image\": "
           "\"flickr30k-images/<id>.jpg\", \"caption\": [5 captions]}]\n  flickr30k_val.json\n  <id>.jpg",
           "the nlphuji/flickr30k files: FLAIR's evaluation")
def load_flickr30k_flair(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                         annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                         num_workers: int | None = None) -> Benchmark:
    """Flickr30k as FLAIR scores it: ``data_dir`` is the ``flickr30k-images/`` folder holding the images and
    ``flickr30k_<split>.json`` (a list of ``{"image": "flickr30k-images/<id>.jpg", "caption": [captions]}``); an
    image path is resolved against the parent of ``data_dir`` (``image_root`` overrides that base). Matches
    ExplainableML/flair ``src/flair/data.py`` ``read_flickr_pairs`` (``os.path.join(os.path.dirname(root_dir),
    annotation["image"])``, ``annotation["caption"]`` a list) and ``datasets/flickr30k-images/flickr30k_val.json``;
    Default split "val" (``flickr30k_val.json``, 1,014 images, the file FLAIR's repository ships), as FLAIR's
    ``--flickr-val-or-test`` defaults to ``val`` (``src/flair/params.py``)."""
    what = "Flickr30k (FLAIR's flickr30k_<split>.json: [{image, caption: [...]}])"
    root = _data_dir(data_dir, what)
    split = _split(split, "flickr30k", "flair")
    path = _annotation(root, annotation_file, [f"flickr30k_{split}.json"], what)
    base = _require_dir(root / image_root, f"{what} image root") if image_root is not None else root.resolve().parent
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of {{image, caption}} objects")
    records = []
    for index, entry in enumerate(entries):
        image = _text(_field(entry, "image", path, index), path, index, "image")
        captions = _field(entry, "caption", path, index)
        if not isinstance(captions, list) or not captions:
            raise _malformed(path, index, f"'caption' must be a non-empty list of captions, got {captions!r}")
        captions = [_text(caption, path, index, "caption[]") for caption in captions]
        records.append(_Record((base / image,), _caption_row(Path(image).stem, captions[0], captions=captions)))
    return _build("flickr30k", records, load_flickr30k_flair.features, split=split, source=path, image_root=base,
                  max_samples=max_samples, num_workers=num_workers)


@_protocol("flickr30k", "tulip", CAPTIONS_FEATURES, ("all",),
           "flickr/                                 <- --data-dir\n"
           "  results.csv                           image_name| comment_number| comment, 5 lines per image\n"
           "  flickr30k_images/flickr30k_images/<id>.jpg   (or flickr30k_images/<id>.jpg)",
           "all 31,783 images of the Kaggle release (results.csv): TULIP's evaluation")
def load_flickr30k_kaggle(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                          annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                          num_workers: int | None = None) -> Benchmark:
    """Flickr30k as TULIP scores it: every image of the Kaggle release's ``results.csv`` (``|``-separated, header
    ``image_name| comment_number| comment``, 5 lines per image; 31,783 images, split "all") with the images in
    ``data_dir/flickr30k_images/flickr30k_images/`` (TULIP's ``Datasets/flickr/``) or ``data_dir/flickr30k_images/``
    (``data_dir`` = the release's outer folder; ``image_root`` overrides both). A line without its third field (the
    release has one: its comment number and comment are not separated) is kept as an empty caption, as TULIP
    replaces the missing value by ``" "``, with a warning. Matches ivonajdenkoska/tulip ``eval/flickr30.py``
    (``pd.read_csv(..., sep="|")``, ``if isinstance(text, float): text = " "``, image ``split("|")[0]`` of every
    5th line)."""
    what = f"Flickr30k Kaggle release ({FLICKR_KAGGLE_CSV}: image_name| comment_number| comment)"
    root = _data_dir(data_dir, what)
    split = _split(split, "flickr30k", "tulip")
    path = _annotation(root, annotation_file, [FLICKR_KAGGLE_CSV], what)
    if image_root is not None:
        images = _require_dir(root / image_root, f"{what} image directory")
    else:
        images = _first_existing([root / "flickr30k_images" / "flickr30k_images", root / "flickr30k_images"],
                                 f"{what} image directory", kind="dir")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text: {error}") from error
    header = [field.strip() for field in lines[0].split("|")] if lines else []
    if header != ["image_name", "comment_number", "comment"]:
        raise ValueError(f"{path}: header {header} is not ['image_name', 'comment_number', 'comment'] separated by '|'")
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("|")
        image = fields[0].strip()
        if not image:
            raise _malformed(path, f"line {number}", f"no image name in {line[:80]!r}")
        caption = "|".join(fields[2:]).strip()
        if len(fields) < 3 or not caption:
            logger.warning("flickr30k: %s line %d: no comment (%r); kept as an empty caption, as TULIP's evaluation "
                           "keeps it", path, number, line[:80])
        pairs.append((f"line {number}", image, caption))
    return _build("flickr30k", _five_per_image(pairs, path, images), load_flickr30k_kaggle.features, split=split,
                  source=path, image_root=images, max_samples=max_samples, num_workers=num_workers)
