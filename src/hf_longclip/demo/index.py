"""The demo's image side: an image folder (or a benchmark split written out as one), its embeddings under each model
computed once and cached on disk as safetensors, and a faiss inner-product index over them. No gradio here.

The cache of one (model, folder) pair is one file named by both; it records the model's fingerprint (its name, Hub
commit and weight files' sizes and times) and every image's (path, size, modification time). A changed model
re-encodes everything; a changed folder re-encodes only its new or modified images and drops the removed ones."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..data.image_files import SkippedSamples, UnreadableImage, open_image
from ..evaluation.encoding import encode_images
from ..modeling_common.optional import require

# the extra `hf-longclip[demo]`: the interface, the image search (faiss) and the figures (matplotlib)
DEMO_PACKAGES = ("gradio", "gradio_client", "faiss-cpu", "matplotlib")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
CACHE_FORMAT = "1"  # bump when the file's layout changes: older files are then recomputed


def list_images(folder: str | Path) -> list[Path]:
    """The image files (by suffix, subfolders included) of `folder`, sorted; a clear error for a missing path, a
    file, or a folder without images."""
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"no such image folder: {folder}")
    if not folder.is_dir():
        raise NotADirectoryError(f"not an image folder: {folder} is a file")
    # a broken link is listed too: it is then skipped and counted as a missing file, not left out unseen
    paths = sorted(path for path in folder.rglob("*")
                   if (path.is_file() or path.is_symlink()) and path.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise ValueError(f"no images in {folder} (looked for {' '.join(IMAGE_SUFFIXES)} files, subfolders included)")
    return paths


def dataset_folder(name: str, data_dir: str | None, output_dir: str | Path, split: str | None = None,
                   max_samples: int | None = None) -> Path:
    """A benchmark split (a name `hf-longclip eval --dataset` takes) written out once as `<output_dir>/<name>-<split>/`:
    its images as `00000.png`, ... and their long captions in `captions.json` (the demo's example queries)."""
    from ..data.eval_datasets import load_eval_dataset

    dataset, split, _, _, _ = load_eval_dataset(name, data_dir, split, max_samples)
    folder = Path(output_dir) / f"{name}-{split}"
    captions = folder / "captions.json"
    if captions.exists() and len(json.loads(captions.read_text())) == len(dataset):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for index, row in enumerate(tqdm(dataset, desc=f"writing {name} {split} images", unit="img")):
        row["image"].convert("RGB").save(folder / f"{index:05d}.png")
    captions.write_text(json.dumps(list(dataset["caption"]), indent=1))
    return folder


def example_captions(folder: Path, count: int = 3) -> list[str]:
    """The first `count` captions of a folder written by `dataset_folder` (none for a user's folder)."""
    captions = Path(folder) / "captions.json"
    return json.loads(captions.read_text())[:count] if captions.exists() else []


def model_fingerprint(model) -> str:
    """What identifies a model's weights: its name or resolved directory, its Hub commit and the sizes and
    modification times of its weight files (a retrained checkpoint in the same directory changes it)."""
    name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    directory = Path(name).expanduser()
    weights = sorted(directory.glob("*.safetensors")) + sorted(directory.glob("*.bin")) if directory.is_dir() else []
    identity = [str(directory.resolve()) if directory.is_dir() else name, getattr(model.config, "_commit_hash", None),
                [(path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in weights]]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()


def file_fingerprints(paths: list[Path], root: Path) -> list[tuple[str, int, int]]:
    """(path relative to `root`, size, modification time in ns) of each image."""
    def stat(path: Path):
        return path.stat() if path.exists() else path.lstat()  # a broken link: the link's own

    return [(path.relative_to(root).as_posix(), stat(path).st_size, stat(path).st_mtime_ns)
            for path in (Path(p) for p in paths)]


def read_image(path: Path) -> Image.Image:
    """The image at `path` as every loader reads it (`data.image_files.open_image`: RGB, EXIF orientation applied,
    an animation's first frame, the pixel limit); `UnreadableImage` (a ValueError) naming the file and the reason
    when it cannot be read ("PIL cannot read NAME: REASON (DETAIL)")."""
    try:
        return open_image(path)
    except UnreadableImage as error:
        detail = f" ({error.detail})" if error.detail and error.detail != error.reason else ""
        error.args = (f"PIL cannot read {Path(path).name}: {error.reason}{detail}",)
        raise


@dataclass
class ImageIndex:
    """The embeddings of a folder's readable images under one model, searchable with faiss (inner product of
    L2-normalised embeddings: cosine similarity). `skipped` holds the files that could not be read and
    `skip_reasons` why ({file: reason}, e.g. "truncated"; `data.image_files`); `encoded` the number of images this
    build encoded (0: all came from the cache)."""

    root: Path
    paths: list[Path]
    embeddings: torch.Tensor
    skipped: list[str] = field(default_factory=list)
    encoded: int = 0
    skip_reasons: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        faiss = require("faiss", "demo", DEMO_PACKAGES, "the demo")
        self.faiss_index = faiss.IndexFlatIP(self.embeddings.shape[1])
        if len(self.paths):
            self.faiss_index.add(np.ascontiguousarray(self.embeddings.numpy(), dtype=np.float32))

    def search(self, query: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
        """Scores and row indices of the `k` images closest to one L2-normalised embedding, best first."""
        scores, rows = self.faiss_index.search(np.ascontiguousarray(query.reshape(1, -1).numpy(), np.float32),
                                               min(k, len(self.paths)))
        return scores[0].tolist(), rows[0].tolist()


def cache_file(cache_dir: Path, model, root: Path) -> Path:
    """The cache file of (model, folder)."""
    folder = hashlib.sha256(str(root.resolve()).encode()).hexdigest()
    return Path(cache_dir) / f"{model_fingerprint(model)[:16]}-{folder[:16]}.safetensors"


def _cached_rows(path: Path, model_key: str) -> tuple[dict, set, dict]:
    """{(file, size, mtime): embedding}, the fingerprints of the skipped files and {file: reason} of a cache file
    written for `model_key`; empty when there is none, or it is of another format or model."""
    if not path.exists():
        return {}, set(), {}
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if metadata.get("format") != CACHE_FORMAT or metadata.get("model") != model_key:
        return {}, set(), {}
    files = [tuple(entry) for entry in json.loads(metadata["files"])]
    embeddings = load_file(str(path))["embeddings"]
    return (dict(zip(files, embeddings)), {tuple(entry) for entry in json.loads(metadata["skipped"])},
            json.loads(metadata["skip_reasons"]))


def build_index(model, processor, folder: str | Path, cache_dir: str | Path, batch_size: int = 32,
                progress: bool = True) -> ImageIndex:
    """The `ImageIndex` of `folder` under `model`: cached embeddings reused, new or modified images encoded (with a
    tqdm progress bar, which the app shows), unreadable ones skipped, named and counted by reason (or, under the
    `error` policy of `data.image_files`, a ValueError naming the first); the cache is rewritten when the folder
    changed."""
    root = Path(folder).expanduser()
    paths = list_images(root)
    files = file_fingerprints(paths, root)
    model_key = model_fingerprint(model)
    path = cache_file(Path(cache_dir), model, root)
    cached, cached_skipped, cached_reasons = _cached_rows(path, model_key)
    unreadable = SkippedSamples(what="image")
    reasons = {entry[0]: cached_reasons.get(entry[0], "unreadable") for entry in files if entry in cached_skipped}
    todo = [i for i, entry in enumerate(files) if entry not in cached and entry not in cached_skipped]
    new_rows, skipped = {}, {entry for entry in files if entry in cached_skipped}
    bar = tqdm(total=len(todo), desc=f"embedding images ({type(model).__name__})", unit="img",
               disable=not (progress and todo))
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        images = {}
        for i in batch:
            try:
                images[i] = read_image(paths[i])
            except UnreadableImage as error:
                unreadable.add(files[i][0], error.reason, str(paths[i]), error.detail)  # raises under `error`
                skipped.add(files[i])
                reasons[files[i][0]] = error.reason
        if images:
            embeddings = encode_images(model, processor, list(images.values()), batch_size=len(images))
            new_rows.update({files[i]: embedding for i, embedding in zip(images, embeddings)})
        bar.update(len(batch))
    bar.close()
    rows = {**cached, **new_rows}
    kept = [i for i, entry in enumerate(files) if entry in rows]
    dimension = next(iter(rows.values())).shape[0] if rows else model.config.projection_dim
    embeddings = torch.stack([rows[files[i]] for i in kept]) if kept else torch.zeros(0, dimension)
    skipped_files = [entry for entry in files if entry in skipped]
    if todo or set(cached) != {files[i] for i in kept} or cached_skipped != set(skipped_files):
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"embeddings": embeddings.contiguous()}, str(path), metadata={
            "format": CACHE_FORMAT, "model": model_key, "files": json.dumps([files[i] for i in kept]),
            "skipped": json.dumps(skipped_files),
            "skip_reasons": json.dumps({entry[0]: reasons[entry[0]] for entry in skipped_files})})
    return ImageIndex(root, [paths[i] for i in kept], embeddings, [entry[0] for entry in skipped_files], len(new_rows),
                      {entry[0]: reasons[entry[0]] for entry in skipped_files})
