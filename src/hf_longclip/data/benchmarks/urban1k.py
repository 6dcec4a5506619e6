"""Urban1k: a caption file per image (Long-CLIP's release), or FLAIR's repackaged ``annotations.json``."""

from __future__ import annotations

import logging

from .flair import FLAIR_FEATURES, load_flair_annotations
from .records import _build, _caption_row, _data_dir, _Record, _require_dir, _split
from .registry import BASE_FEATURES, Benchmark, PathLike, _protocol, _register

logger = logging.getLogger(__name__)


@_register("urban1k", BASE_FEATURES, ("test",), "Urban1k: 1000 urban images with long captions, paired by file name",
           protocol="longclip", protocol_description="Long-CLIP's release (also HiMo-CLIP's and TULIP's evaluation)",
           layout="Urban1k/            <- --data-dir\n  caption/<N>.txt    first line = the caption\n"
                  "  image/<N>.jpg")
def load_urban1k(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                 annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                 num_workers: int | None = None) -> Benchmark:
    """Urban1k: ``data_dir/caption/<stem>.txt`` paired with ``data_dir/image/<stem>.jpg``.

    The caption is the first line of the txt (stripped). A file whose first line is empty (one in the release) is
    kept as an empty caption, as the official evaluation keeps it (``readlines()[0]``), with a warning naming it.
    Files are read in sorted name order (the public code uses unsorted ``os.listdir``); a caption whose image is
    missing or corrupt is skipped and counted, images without a caption are ignored. ``annotation_file`` overrides
    the caption directory, ``image_root`` the image directory. Matches beichenzbc/Long-CLIP
    ``eval/retrieval/Urban1k.py`` (also UnicomAI/HiMo-CLIP ``eval/retrieval/Urban1k.py``): iterate ``caption/``,
    image name = caption name ``[:-4] + ".jpg"``, caption = ``readlines()[0]``.
    """
    what = "Urban1k (caption/<name>.txt + image/<name>.jpg)"
    root = _data_dir(data_dir, what)
    split = _split(split, "urban1k")
    captions = _require_dir(root / (annotation_file if annotation_file is not None else "caption"),
                            f"{what} caption directory")
    images = _require_dir(root / (image_root if image_root is not None else "image"), f"{what} image directory")
    records = []
    for path in sorted(captions.glob("*.txt")):
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not UTF-8 text: {error}") from error
        caption = lines[0].strip() if lines else ""
        if not caption:
            logger.warning("urban1k: %s: the first line (the caption) is empty; kept as an empty caption, as the "
                           "official evaluation reads it", path)
        records.append(_Record((images / f"{path.stem}.jpg",), _caption_row(path.stem, caption)))
    if not records:
        raise FileNotFoundError(f"{what}: no caption files (*.txt) in {captions}")
    return _build("urban1k", records, load_urban1k.features, split=split, source=captions, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)


@_protocol("urban1k", "flair", FLAIR_FEATURES, ("test",),
           "Urban1k/                         <- --data-dir\n  images/<N>.jpg\n"
           "  annotations/annotations.json    {\"annotations\": [{\"image_id\", \"image\", \"caption\"}]}",
           "FLAIR's repackaged annotations (ExplainableML/flair datasets/Urban1k)")
def load_urban1k_flair(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                       annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                       num_workers: int | None = None) -> Benchmark:
    """Urban1k as FLAIR evaluates it: ``data_dir/annotations/annotations.json`` (copied from ExplainableML/flair
    ``datasets/Urban1k/annotations/``) and the release's images moved to ``data_dir/images/``; read as
    `load_flair_annotations` (ExplainableML/flair ``src/flair/data.py`` ``read_urban1k_pairs``)."""
    return load_flair_annotations("urban1k", "flair", data_dir, split, max_samples, "annotations/annotations.json",
                                  annotation_file, image_root, num_workers, load_urban1k_flair)
