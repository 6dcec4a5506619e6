"""Crisscrossed Captions (CxC) positives on the COCO Karpathy val / test splits."""

from __future__ import annotations

import re
from pathlib import Path

import datasets

from .karpathy import _karpathy
from .records import _coco_id, _data_dir, _first_existing, _malformed, _read_csv, _require_dir, _require_file
from .registry import BASE_FEATURES, TEXTS, Benchmark, PathLike, _register

CXC_SPLITS = ("test", "val")
# Where the CxC csvs are looked for under the COCO folder: a clone (default name, or renamed cxc) or the bare files
CXC_FOLDERS = ("Crisscrossed-Captions/data", "cxc/data", "cxc")
# A CxC pair counts as a positive when its aggregated score (0-5) is at least this. STS and SITS: 3, the value the
# brief of this evaluation and the CxC paper's retrieval protocol use; SIS: 2.5 (the paper lowers it for image pairs,
# which rarely get high ratings: recalled from the paper, not verified against its text here). Override with
# ``load_coco_cxc(..., thresholds={...})``.
CXC_THRESHOLDS = {"sits": 3.0, "sts": 3.0, "sis": 2.5}
# The two id columns of each CxC file (google-research-datasets/Crisscrossed-Captions, data/<kind>_<split>.csv;
# header e.g. ``caption,image,agg_score,sampling_method``)
CXC_ID_COLUMNS = {"sits": ("caption", "image"), "sts": ("caption1", "caption2"), "sis": ("image1", "image2")}
CXC_COLUMNS = ("image_id", "sentids", "cxc_images", "cxc_texts", "cxc_caption_positives")
_CXC_CAPTION = re.compile(r":sentid:(\d+)$")
_CXC_IMAGE = re.compile(r"_(\d+)\.(?:jpe?g|png)$", re.IGNORECASE)
INT64 = datasets.Value("int64")
CXC_FEATURES = {**BASE_FEATURES, "captions": TEXTS, "image_id": INT64, "sentids": datasets.List(INT64),
                "cxc_images": datasets.List(INT64), "cxc_texts": datasets.List(INT64),
                "cxc_caption_positives": datasets.List(datasets.List(INT64))}


def _cxc_id(value: str, kind: str, path: Path, line: str) -> int:
    """A CxC id as an int: ``COCO_val2014:sentid:732091`` -> the Karpathy sentid 732091; an image file name
    ``COCO_val2014_000000365325.jpg`` -> the COCO image id 365325."""
    match = (_CXC_CAPTION if kind == "caption" else _CXC_IMAGE).search(value.strip())
    if match is None:
        expected = "COCO_val2014:sentid:<N>" if kind == "caption" else "COCO_val2014_<12 digits>.jpg"
        raise _malformed(path, line, f"{kind} id {value!r} is not of the form {expected}")
    return int(match.group(1))


def read_cxc(cxc_dir: PathLike, split: str = "test") -> dict[str, list[tuple[int, int, float]]]:
    """The aggregated CxC ratings of ``split``: ``{"sits": [(sentid, coco_image_id, score), ...], "sts": [(sentid,
    sentid, score), ...], "sis": [(coco_image_id, coco_image_id, score), ...]}`` read from
    ``cxc_dir/{sits,sts,sis}_<split>.csv`` (the files of the repository's ``data/`` folder; the ``*_raw.csv``
    per-annotator files are not read)."""
    if split not in CXC_SPLITS:
        raise ValueError(f"cxc: unknown split {split!r}; expected one of {', '.join(CXC_SPLITS)}")
    root = _require_dir(Path(cxc_dir), "Crisscrossed Captions folder ({sits,sts,sis}_<split>.csv)")
    pairs = {}
    for kind, (first, second) in CXC_ID_COLUMNS.items():
        path = _require_file(root / f"{kind}_{split}.csv",
                             f"CxC {kind.upper()} ratings (csv: {first},{second},agg_score,sampling_method)")
        kinds = [column.rstrip("12") for column in (first, second)]
        rows = []
        for line, row in _read_csv(path, ",", (first, second, "agg_score")):
            try:
                score = float(row["agg_score"])
            except ValueError:
                raise _malformed(path, line, f"agg_score {row['agg_score']!r} is not a number") from None
            rows.append((_cxc_id(row[first], kinds[0], path, line), _cxc_id(row[second], kinds[1], path, line),
                         score))
        pairs[kind] = rows
    return pairs


def _sentids(entry: dict, path: Path, index: int) -> list[int]:
    """The Karpathy sentid of each of ``entry``'s sentences (its ``sentid``, else the entry's ``sentids``)."""
    sentences = entry["sentences"]
    fallback = entry.get("sentids")
    ids = []
    for position, sentence in enumerate(sentences):
        value = sentence.get("sentid") if isinstance(sentence, dict) else None
        if value is None and isinstance(fallback, list) and len(fallback) == len(sentences):
            value = fallback[position]
        if isinstance(value, bool) or not isinstance(value, int):
            raise _malformed(path, index, f"sentence {position} has no integer 'sentid' (CxC names captions by it)")
        ids.append(value)
    return ids


@_register("coco_cxc", CXC_FEATURES, CXC_SPLITS,
           "MS-COCO Karpathy test/val with Crisscrossed Captions positives (I2T, T2I, T2T, I2I)",
           protocol="official", protocol_description="the Karpathy split with the google-research-datasets clone",
           layout="coco/                       <- --data-dir\n  dataset_coco.json\n  val2014/\n"
                  "  Crisscrossed-Captions/      the clone (or cxc/)\n"
                  "    data/{sits,sts,sis}_test.csv   (and *_val.csv)")
def load_coco_cxc(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                  annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                  cxc_dir: PathLike | None = None, thresholds: dict[str, float] | None = None,
                  num_workers: int | None = None) -> Benchmark:
    """COCO Karpathy "test" (default; 5000 images) or "val" split as `load_coco` reads it, plus the Crisscrossed
    Captions positives of each row (Parekh et al., EACL 2021;
    github.com/google-research-datasets/Crisscrossed-Captions).

    Layout: the `load_coco` files in ``data_dir`` and the CxC csvs (``sits_test.csv``, ``sts_test.csv``,
    ``sis_test.csv``, or ``*_val.csv``) in ``cxc_dir`` (resolved against ``data_dir``; default: the first of
    `CXC_FOLDERS` holding ``sits_<split>.csv``: the repository cloned as ``Crisscrossed-Captions/`` or ``cxc/``, its
    ``data/`` folder, or the csvs directly in ``cxc/``). CxC names a caption ``COCO_val2014:sentid:<Karpathy
    sentid>`` and an image by its COCO file name ``COCO_val2014_<id>.jpg``; both are mapped onto the Karpathy rows
    by sentid / COCO id.

    Extra columns (beyond `load_coco`'s): ``image_id`` (the COCO id), ``sentids`` (the Karpathy sentid of each of
    ``captions``), ``cxc_images`` (COCO ids of the other images rated similar to this one: SIS score >=
    ``thresholds["sis"]``, both directions), ``cxc_texts`` (sentids of the captions of OTHER images rated as
    describing this one: SITS score >= ``thresholds["sits"]``; the image's own captions stay positives anyway), and
    ``cxc_caption_positives`` (per caption, the sentids rated similar to it: STS score >= ``thresholds["sts"]``,
    both directions, co-captions included only when rated so). Thresholds default to `CXC_THRESHOLDS`.
    Pairs naming an image or caption outside the split are kept as ids; `hf_longclip.evaluation` ignores ids of rows
    that are not loaded (and counts them). The ``retrieval`` evaluation of these rows adds a ``cxc`` entry.
    """
    split = split or CXC_SPLITS[0]
    if split not in CXC_SPLITS:
        raise ValueError(f"coco_cxc: unknown split {split!r}; expected one of {', '.join(CXC_SPLITS)}")
    limits = {**CXC_THRESHOLDS, **(thresholds or {})}
    unknown = sorted(set(limits) - set(CXC_THRESHOLDS))
    if unknown:
        raise ValueError(f"unknown CxC threshold(s) {unknown}; expected keys among {sorted(CXC_THRESHOLDS)}")
    root = _data_dir(data_dir, "COCO Karpathy split (dataset_coco.json) with a cxc/ folder")
    if cxc_dir is not None:
        folder = _require_dir(root / cxc_dir, "Crisscrossed Captions folder ({sits,sts,sis}_<split>.csv)")
    else:
        candidates = [root / folder for folder in CXC_FOLDERS]
        folder = _first_existing([candidate / f"sits_{split}.csv" for candidate in candidates],
                                 f"Crisscrossed Captions ratings ({{sits,sts,sis}}_{split}.csv)").parent
    pairs = read_cxc(folder, split)
    similar_images: dict[int, set[int]] = {}
    for first, second, score in pairs["sis"]:
        if score >= limits["sis"] and first != second:
            similar_images.setdefault(first, set()).add(second)
            similar_images.setdefault(second, set()).add(first)
    describing: dict[int, set[int]] = {}
    for sentid, image, score in pairs["sits"]:
        if score >= limits["sits"]:
            describing.setdefault(image, set()).add(sentid)
    similar_captions: dict[int, set[int]] = {}
    for first, second, score in pairs["sts"]:
        if score >= limits["sts"] and first != second:
            similar_captions.setdefault(first, set()).add(second)
            similar_captions.setdefault(second, set()).add(first)

    def extra(entry: dict, path: Path, index: int) -> dict:
        sentids = _sentids(entry, path, index)
        coco_id = entry.get("cocoid")
        if isinstance(coco_id, bool) or not isinstance(coco_id, int):
            coco_id = _coco_id(entry["filename"])
            if coco_id is None:
                raise _malformed(path, index, "no integer 'cocoid' and no COCO id in the file name")
        own = set(sentids)
        return {"image_id": coco_id, "sentids": sentids, "cxc_images": sorted(similar_images.get(coco_id, ())),
                "cxc_texts": sorted(describing.get(coco_id, set()) - own),
                "cxc_caption_positives": [sorted(similar_captions.get(sentid, ())) for sentid in sentids]}

    benchmark = _karpathy("coco", root, split, max_samples, annotation_file, image_root, num_workers,
                          "dataset_coco.json", lambda directory: directory, load_coco_cxc, extra=extra)
    benchmark.name = "coco_cxc"
    return benchmark
