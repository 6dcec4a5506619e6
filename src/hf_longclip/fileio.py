"""Atomic file writes (readers, and a run killed mid-write, never see a partial file), the file hash of the
integrity manifests (XXH3-128), and damaged weight files named."""

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import xxhash  # a requirement of datasets, which the library requires (xxh3_128: xxhash 2.0 and later)
from safetensors import SafetensorError, safe_open

# The hash of every file in the manifests of checkpoints and shards, by its name there (`xxh3_128`): XXH3-128
# hashes at memory speed (about 12 GB/s on one core, against 1 GB/s for SHA-256). It detects damage (a truncated file,
# flipped bits), not tampering: a manifest lies beside the files it hashes.
HASH = "xxh3_128"


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends: written as a temporary file in the same directory,
    flushed to disk and renamed into place, or removed if the block raises. For writers that stream (a tar); its
    permissions are those `open(path, "wb")` would give (the umask's)."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` to `path` atomically (`open_atomic`)."""
    with open_atomic(path) as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


def xxh3_128(file: str | os.PathLike | BinaryIO, block: int = 1 << 20) -> str:
    """Hex XXH3-128 of a file's bytes (`file` a path), or of what is left to read from a binary file object, read in
    `block`-byte pieces into one buffer."""
    if isinstance(file, (str, os.PathLike)):
        with Path(file).open("rb", buffering=0) as handle:
            return xxh3_128(handle, block)
    digest, buffer = xxhash.xxh3_128(), bytearray(block)
    view = memoryview(buffer)
    while read := file.readinto(buffer):
        digest.update(view[:read])
    return digest.hexdigest()


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
