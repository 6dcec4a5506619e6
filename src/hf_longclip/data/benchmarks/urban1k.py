"""Urban1k: a caption file per image."""

from __future__ import annotations

from .records import _build, _caption_row, _data_dir, _Record, _require_dir, _split, _text
from .registry import BASE_FEATURES, Benchmark, PathLike, _register


@_register("urban1k", BASE_FEATURES, ("test",), "Urban1k: 1000 urban images with long captions, paired by file name")
def load_urban1k(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                 annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                 num_workers: int | None = None) -> Benchmark:
    """Urban1k: ``data_dir/caption/<stem>.txt`` paired with ``data_dir/image/<stem>.jpg``.

    The caption is the first line of the txt (stripped). Caption files are read in sorted name order (the public
    code uses unsorted ``os.listdir``); a caption whose image is missing or corrupt is skipped and counted, images
    without a caption are ignored. ``annotation_file`` overrides the caption directory, ``image_root`` the image
    directory. Matches beichenzbc/Long-CLIP ``eval/retrieval/Urban1k.py`` (also UnicomAI/HiMo-CLIP
    ``eval/retrieval/Urban1k.py``): iterate ``caption/``, image name = caption name ``[:-4] + ".jpg"``, caption =
    ``readlines()[0]``.
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
        caption = _text(lines[0] if lines else "", path, "line 1", "caption")
        records.append(_Record((images / f"{path.stem}.jpg",), _caption_row(path.stem, caption)))
    if not records:
        raise FileNotFoundError(f"{what}: no caption files (*.txt) in {captions}")
    return _build("urban1k", records, load_urban1k.features, split=split, source=captions, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)
