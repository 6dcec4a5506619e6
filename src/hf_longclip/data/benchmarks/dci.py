"""Long-DCI: DCI's long extra captions, TULIP's tab-separated file or FLAIR's reading of DCI's release."""

from __future__ import annotations

import re
from pathlib import Path

from .records import (
    _annotation,
    _build,
    _caption_row,
    _data_dir,
    _field,
    _malformed,
    _read_csv,
    _read_json,
    _Record,
    _require_dir,
    _require_file,
    _split,
    _text,
)
from .registry import BASE_FEATURES, Benchmark, PathLike, _protocol, _register

LONG_DCI_CSV = "dci_long.csv"
DCI_RELEASE = "densely_captioned_images"
_FLAIR_SENTENCE_END = re.compile(r"\n|</s>|[.]")


@_register("long_dci", BASE_FEATURES, ("test",), "Long-DCI: 7.8k SA-1B images with DCI's long extra captions",
           protocol="tulip", protocol_description="TULIP's dci_long.csv (also HiMo-CLIP's evaluation)",
           layout="dci/                 <- --data-dir\n  dci_long.csv         filepath<TAB>title, pandas-quoted\n"
                  "  sa_<n>.jpg           (or photos/, densely_captioned_images/photos/, or ../SA1B/: HiMo-CLIP's)")
def load_long_dci(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                  annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                  num_workers: int | None = None) -> Benchmark:
    """Long-DCI: ``data_dir/dci_long.csv``, tab-separated with a header row ``filepath<TAB>title`` (written by
    pandas ``to_csv(sep="\\t", index=False)``, so fields holding tabs, quotes or newlines are double-quoted).

    ``filepath`` is the DCI image file name (``sa_<n>.jpg``) and ``title`` the caption (DCI's ``extra_caption``).
    Images are looked up at ``image_root/<filepath>`` when ``image_root`` is given, else at ``data_dir/<filepath>``,
    ``data_dir/photos/<filepath>``, ``data_dir/densely_captioned_images/photos/<filepath>`` (the DCI release
    layout) or ``data_dir/../SA1B/<filepath>`` (HiMo-CLIP's ``data/dci`` beside ``data/SA1B``), first found.
    Matches ivonajdenkoska/tulip ``open_clip/data_prep/dci_long_part.py`` (writes the csv from
    the DCI annotations, skipping empty extra captions) and ``eval/dci_long.py`` (``pd.read_csv(..., sep="\\t")``,
    image = ``os.path.join(data_path, filepath)``), and UnicomAI/HiMo-CLIP ``eval/retrieval/dci_long.py`` (same csv,
    images under a separate SA-1B root).
    """
    what = f"Long-DCI ({LONG_DCI_CSV}: tab-separated filepath, title with a header row)"
    root = _data_dir(data_dir, what)
    split = _split(split, "long_dci")
    path = _annotation(root, annotation_file, [LONG_DCI_CSV], what)
    if image_root is not None:
        roots = [_require_dir(root / image_root, f"{what} image root")]
    else:
        roots = [root, root / "photos", root / "densely_captioned_images" / "photos", root.parent / "SA1B"]
    records = []
    for line, row in _read_csv(path, "\t", ("filepath", "title")):
        image = _text(row["filepath"], path, line, "filepath")
        caption = _text(row["title"], path, line, "title")
        found = next((candidate / image for candidate in roots if (candidate / image).is_file()), roots[0] / image)
        records.append(_Record((found,), _caption_row(Path(image).stem, caption)))
    return _build("long_dci", records, load_long_dci.features, split=split, source=path, image_root=roots[0],
                  max_samples=max_samples, num_workers=num_workers)


def _flair_rejoin(text: str) -> str:
    """FLAIR's ``". ".join(split_caption(text))``: pieces between newlines, ``</s>`` and periods, stripped, the
    empty ones dropped (ExplainableML/flair ``src/flair/data.py`` ``split_caption``)."""
    return ". ".join(piece.strip() for piece in _FLAIR_SENTENCE_END.split(text) if piece.strip())


@_protocol("long_dci", "flair", BASE_FEATURES, ("test",),
           "dci/                            <- --data-dir\n  densely_captioned_images/\n"
           "    splits.json                 {\"train\": [...], \"valid\": [...], \"test\": [...]} annotation files\n"
           "    annotations/<n>-data.json   {\"image\", \"short_caption\", \"extra_caption\", ...}\n"
           "    photos/sa_<n>.jpg",
           "DCI's release, every image, short + extra caption: FLAIR's evaluation")
def load_long_dci_flair(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                        annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                        num_workers: int | None = None) -> Benchmark:
    """DCI as FLAIR's long retrieval reads it: every annotation file listed in
    ``data_dir/densely_captioned_images/splits.json`` (all its splits, in their order; ``annotation_file`` names
    another splits file), image ``photos/<image>``, caption ``short_caption + "\\n" + extra_caption`` split at
    newlines, ``</s>`` and periods and rejoined with ``". "``. Matches ExplainableML/flair ``src/flair/data.py``
    ``read_dci_pairs`` and its ``datasets/EVAL_DATASETS.md`` tree."""
    what = f"DCI release ({DCI_RELEASE}/splits.json, annotations/, photos/)"
    root = _data_dir(data_dir, what)
    split = _split(split, "long_dci", "flair")
    release = _require_dir(root / DCI_RELEASE, what)
    path = _annotation(root, annotation_file, [f"{DCI_RELEASE}/splits.json"], what)
    annotations = _require_dir(release / "annotations", f"{what} annotation directory")
    images = _require_dir(root / image_root if image_root is not None else release / "photos",
                          f"{what} image directory")
    splits = _read_json(path)
    if not isinstance(splits, dict) or not all(isinstance(files, list) for files in splits.values()):
        raise ValueError(f"{path}: expected a JSON object of split name -> list of annotation file names")
    records = []
    for split_name, files in splits.items():
        for index, name in enumerate(files):
            record = f"{split_name}[{index}]"
            file = _require_file(annotations / _text(name, path, record, "file name"), f"{what} annotation")
            entry = _read_json(file)
            image = _text(_field(entry, "image", file, "object"), file, "object", "image")
            short, extra = (_field(entry, key, file, "object") for key in ("short_caption", "extra_caption"))
            if not isinstance(short, str) or not isinstance(extra, str):
                raise _malformed(file, "object", "'short_caption' and 'extra_caption' must be strings")
            caption = _flair_rejoin(f"{short}\n{extra}")
            records.append(_Record((images / image,), _caption_row(Path(image).stem, caption)))
    return _build("long_dci", records, load_long_dci_flair.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)
