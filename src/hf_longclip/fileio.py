"""Atomic file writes (readers, and a run killed mid-write, never see a partial file) and file checksums."""

import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO


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
