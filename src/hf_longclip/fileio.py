"""Atomic file writes: readers (and a run killed mid-write) never see a partial file."""

import os
import tempfile
from pathlib import Path


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
