"""Zero-shot classification on an image folder: one folder per class (e.g. ImageNet's validation set laid out by
class), class names from the folder names or a file."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import datasets

from ...metrics.zero_shot import DEFAULT_TEMPLATES, IMAGENET_TEMPLATES
from .records import _build, _data_dir, _malformed, _Record, _require_file, _split
from .registry import IMAGE, TEXT, Benchmark, PathLike, _protocol, _register

CLASSNAMES_FILE = "classnames.txt"
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
IMAGEFOLDER_FEATURES = {"id": TEXT, "image": IMAGE, "label": datasets.Value("int64")}  # `label`: a ClassLabel
_LAYOUT = ("val/                           <- --data-dir\n"
           "  <class folder>/<image>.JPEG    one folder per class, e.g. ImageNet's n01440764/ ...\n"
           "  classnames.txt                 optional: '<folder> <name>' lines, or one name per line in the\n"
           "                                 sorted order of the folders (else: the folder names)")


def _classnames(folders: Sequence[str], path: Path | None) -> list[str]:
    """The class name of each folder: from ``path`` ('<folder> <name>' lines, or one name per line in folder
    order), else the folder name with underscores as spaces."""
    if path is None:
        return [folder.replace("_", " ") for folder in folders]
    lines = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    mapping = dict(line.split(maxsplit=1) for line in lines if len(line.split(maxsplit=1)) == 2)
    if set(folders) <= set(mapping) and len(mapping) == len(lines):
        return [mapping[folder].strip() for folder in folders]
    if len(lines) != len(folders):
        raise _malformed(path, "file", f"{len(lines)} class names for {len(folders)} class folders; expected one name "
                                       f"per folder in sorted folder order, or '<folder> <name>' lines naming every "
                                       f"folder (first folders: {', '.join(folders[:3])})")
    return lines


def _image_folder(protocol: str, templates: Sequence[str], data_dir: PathLike, split: str | None,
                  max_samples: int | None, annotation_file: PathLike | None, image_root: PathLike | None,
                  num_workers: int | None) -> Benchmark:
    what = "image folder (one sub-folder of images per class)"
    root = _data_dir(data_dir, what)
    split = _split(split, "imagefolder", protocol)
    images = _data_dir(root / image_root, f"{what} image root") if image_root is not None else root
    folders = sorted(entry.name for entry in images.iterdir() if entry.is_dir() and not entry.name.startswith("."))
    if not folders:
        raise FileNotFoundError(f"{what}: no class folders in {images}")
    if annotation_file is not None:
        names_file = _require_file(root / annotation_file, f"{what} class names")
    else:
        names_file = root / CLASSNAMES_FILE if (root / CLASSNAMES_FILE).is_file() else None
    classnames = _classnames(folders, names_file)
    records = []
    for label, folder in enumerate(folders):
        for file in sorted((images / folder).iterdir()):
            # a broken link is kept: counted as a missing file, not left out unseen
            if (file.is_file() or file.is_symlink()) and file.suffix.lower() in IMAGE_SUFFIXES:
                records.append(_Record((file,), {"id": f"{folder}/{file.name}", "label": label}))
    if not records:
        raise FileNotFoundError(f"{what}: no image files ({', '.join(sorted(IMAGE_SUFFIXES))}) in the class folders "
                                f"of {images}")
    features = datasets.Features({**IMAGEFOLDER_FEATURES, "label": datasets.ClassLabel(names=classnames)})
    benchmark = _build("imagefolder", records, features, split=split, source=names_file or images,
                       image_root=images, max_samples=max_samples, num_workers=num_workers)
    benchmark.templates = tuple(templates)
    return benchmark


def _loader(protocol: str, templates: Sequence[str]) -> Callable[..., Benchmark]:
    def load(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
             annotation_file: PathLike | None = None, image_root: PathLike | None = None,
             num_workers: int | None = None) -> Benchmark:
        return _image_folder(protocol, templates, data_dir, split, max_samples, annotation_file, image_root,
                             num_workers)
    return load


load_image_folder = _register(
    "imagefolder", IMAGEFOLDER_FEATURES, ("val",),
    "image classification folders (e.g. ImageNet val by class): zero-shot top-1/top-5", protocol="clip",
    protocol_description=f"prompt ensemble of CLIP's {len(IMAGENET_TEMPLATES)} ImageNet templates", layout=_LAYOUT,
)(_loader("clip", IMAGENET_TEMPLATES))
load_image_folder.__doc__ = f"""An image-classification folder: ``data_dir/<class folder>/<image>`` (classes in
sorted folder order, as torchvision ``ImageFolder``; files with the suffixes {sorted(IMAGE_SUFFIXES)}), class names
from ``data_dir/{CLASSNAMES_FILE}`` (or ``annotation_file``: ``<folder> <name>`` lines such as ImageNet's
``LOC_synset_mapping.txt``, or one name per line in folder order such as CLIP's ImageNet class names) or else the
folder names (underscores as spaces). Rows: ``id`` (``<folder>/<file>``), ``image``, ``label`` (a ``ClassLabel``
of the class names); ``Benchmark.templates`` are CLIP's 80 ImageNet prompt templates (protocol "clip") or the one
``"a photo of a {{}}."`` (protocol "simple")."""
load_image_folder_simple = _protocol("imagefolder", "simple", IMAGEFOLDER_FEATURES, ("val",), _LAYOUT,
                                     "the one template 'a photo of a {}.'")(_loader("simple", DEFAULT_TEMPLATES))
