"""Long-DCI: DCI's long extra captions, a tab-separated file."""

from __future__ import annotations

from pathlib import Path

from .records import _annotation, _build, _caption_row, _data_dir, _read_csv, _Record, _require_dir, _split, _text
from .registry import BASE_FEATURES, Benchmark, PathLike, _register

LONG_DCI_CSV = "dci_long.csv"


@_register("long_dci", BASE_FEATURES, ("test",), "Long-DCI: 7.8k SA-1B images with DCI's long extra captions")
def load_long_dci(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                  annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                  num_workers: int | None = None) -> Benchmark:
    """Long-DCI: ``data_dir/dci_long.csv``, tab-separated with a header row ``filepath<TAB>title`` (written by
    pandas ``to_csv(sep="\\t", index=False)``, so fields holding tabs, quotes or newlines are double-quoted).

    ``filepath`` is the DCI image file name (``sa_<n>.jpg``) and ``title`` the caption (DCI's ``extra_caption``).
    Images are looked up at ``image_root/<filepath>`` when ``image_root`` is given, else at ``data_dir/<filepath>``,
    ``data_dir/photos/<filepath>`` or ``data_dir/densely_captioned_images/photos/<filepath>`` (the DCI release
    layout), first found. Matches ivonajdenkoska/tulip ``open_clip/data_prep/dci_long_part.py`` (writes the csv from
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
        roots = [root, root / "photos", root / "densely_captioned_images" / "photos"]
    records = []
    for line, row in _read_csv(path, "\t", ("filepath", "title")):
        image = _text(row["filepath"], path, line, "filepath")
        caption = _text(row["title"], path, line, "title")
        found = next((candidate / image for candidate in roots if (candidate / image).is_file()), roots[0] / image)
        records.append(_Record((found,), _caption_row(Path(image).stem, caption)))
    return _build("long_dci", records, load_long_dci.features, split=split, source=path, image_root=roots[0],
                  max_samples=max_samples, num_workers=num_workers)
