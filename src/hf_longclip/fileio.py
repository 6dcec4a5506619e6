"""Atomic file writes (readers, and a run killed mid-write, never see a partial file), file checksums, and damaged
weight files named."""

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from safetensors import SafetensorError, safe_open


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary file in the same directory, then rename it into place."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def sha256_stream(handle: BinaryIO) -> str:
    """Hex SHA-256 of what is left to read from a binary file object, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    with Path(path).open("rb") as handle:
        return sha256_stream(handle)


def _safetensors_problem(path: Path) -> str | None:
    try:
        with safe_open(path, "pt") as weights:
            weights.keys()
    except (SafetensorError, OSError) as error:
        return str(error)
    return None


@contextlib.contextmanager
def naming_damaged_weights(checkpoint: str | os.PathLike):
    """Turn safetensors' error while loading `checkpoint` (a directory, or a Hub id: its cached snapshot), which names
    no file, into an OSError naming each damaged `.safetensors` file (truncated, or not safetensors at all)."""
    try:
        yield
    except SafetensorError as error:
        directory = Path(checkpoint)
        if not directory.is_dir():
            from huggingface_hub import snapshot_download

            with contextlib.suppress(Exception):
                directory = Path(snapshot_download(str(checkpoint), local_files_only=True))
        damaged = [f"{path} ({problem})" for path in sorted(directory.glob("*.safetensors"))
                   if (problem := _safetensors_problem(path))]
        raise OSError(f"damaged weights in {checkpoint}: {', '.join(damaged) or error}: copy or download the "
                      f"checkpoint again") from error
