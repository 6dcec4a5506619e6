"""The negative bank of PO-HNM (OneLIP Sec. 3.2): the frozen base CLIP's embeddings of every training caption (the
Z_hat_text^neg of Eq. 8), and of every training image (the anchors of the initial mining), computed once and stored
on disk as memory-mapped float16 arrays, so that a run at ShareGPT4V's 1.2M captions neither recomputes nor holds
them in memory.

    bank = NegativeBank.build_or_load(directory, dataset, base_clip, processor, accelerator)

Layout of `directory` (rows in dataset order; sample s owns captions `offsets[s]:offsets[s + 1]`, the first being
the caption it is trained on, then the other captions of its image):

    captions.f16   (num_captions, dim) float16, L2-normalised base text embeddings (first T_f tokens)
    images.f16     (num_samples, dim)  float16, L2-normalised base image embeddings
    owners.i32     (num_captions,)     int32, the sample each caption belongs to
    offsets.i64    (num_samples + 1,)  int64
    bank.json      written last: format, dataset fingerprint, base-model digest, sizes

A bank is keyed by the dataset's `datasets` fingerprint and a SHA-256 of the base model's weights: the default
directory is named after both, so later runs on the same data and base reuse it; a directory holding the bank of
other data or another base is refused with an error naming both.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import CLIPModel

from hf_longclip.fileio import write_atomic

BANK_FORMAT = 1
METADATA = "bank.json"


def model_digest(model: torch.nn.Module) -> str:
    """SHA-256 of a model's weights (names, shapes, dtypes and bytes), independent of where it was loaded from."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def sample_captions(row: dict, text_column: str = "caption", captions_column: str = "captions") -> list[str]:
    """A training row's captions: the one it is trained on first, then its image's other captions (if the row has a
    `captions_column`), without repeats."""
    first = row[text_column]
    return [first, *dict.fromkeys(c for c in row.get(captions_column) or () if c != first)]


class NegativeBank:
    """Read-only view of a bank directory (see the module docstring); arrays are memory-mapped."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        meta_file = self.directory / METADATA
        if not meta_file.is_file():
            raise FileNotFoundError(f"{self.directory} holds no complete negative bank (no {METADATA})")
        self.metadata = json.loads(meta_file.read_text())
        if self.metadata.get("format") != BANK_FORMAT:
            raise ValueError(f"{meta_file}: bank format {self.metadata.get('format')}, expected {BANK_FORMAT}")
        n, c, d = self.metadata["num_samples"], self.metadata["num_captions"], self.metadata["dim"]
        self.captions = self._map("captions.f16", np.float16, (c, d))
        self.images = self._map("images.f16", np.float16, (n, d))
        self.owners = self._map("owners.i32", np.int32, (c,))
        self.offsets = self._map("offsets.i64", np.int64, (n + 1,))

    def _map(self, name: str, dtype, shape: tuple[int, ...]) -> np.memmap:
        """The bank file `name` memory-mapped, once its size is checked against what `bank.json` says it holds."""
        path = self.directory / name
        expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
        found = path.stat().st_size if path.is_file() else None
        if found != expected:
            raise ValueError(
                f"negative bank file {path} is {'missing' if found is None else f'{found} bytes'}, but {METADATA} "
                f"says it holds {shape} {np.dtype(dtype).name} ({expected} bytes): the bank is damaged; delete "
                f"{self.directory} to rebuild it"
            )
        return np.memmap(path, dtype, "r", shape=shape)

    @property
    def num_samples(self) -> int:
        return self.metadata["num_samples"]

    @property
    def dim(self) -> int:
        return self.metadata["dim"]

    def caption_chunks(self, rows: int = 65536):
        """The caption embeddings as float32 arrays of `rows` rows, read from the file without mapping it (so that
        building an index over a large bank leaves no file pages resident in this process)."""
        for start in range(0, len(self.captions), rows):
            count = min(rows, len(self.captions) - start)
            yield np.fromfile(self.directory / "captions.f16", dtype=np.float16, count=count * self.dim,
                              offset=start * self.dim * 2).reshape(count, self.dim).astype(np.float32)

    def check(self, fingerprint: str, base_digest: str) -> None:
        """Raise unless this bank was built from the data with `fingerprint` by the base with `base_digest`."""
        for what, found, expected in (("dataset fingerprint", self.metadata["fingerprint"], fingerprint),
                                      ("base model digest", self.metadata["base_model"], base_digest)):
            if found != expected:
                raise ValueError(
                    f"the negative bank in {self.directory} does not match this run: its {what} is {found}, this "
                    f"run's is {expected}. Use another --negative_bank directory or delete this one to rebuild it"
                )

    @classmethod
    @torch.no_grad()
    def build_or_load(
        cls, directory: str | Path, dataset, base: CLIPModel, processor, accelerator: Accelerator,
        batch_size: int = 256, text_column: str = "caption", captions_column: str = "captions",
        image_column: str = "image", base_digest: str | None = None,
    ) -> NegativeBank:
        """The bank of `dataset` (a `datasets.Dataset`) under `base` in `directory`: loaded and checked if it exists,
        otherwise built, every process encoding a contiguous share of the samples, with a progress bar.
        `processor` tokenises (truncating at the base's 77 positions) and preprocesses images. `base_digest`:
        `model_digest(base)` if the caller has it already (hashing a ViT-B/16 reads 600 MB)."""
        directory = Path(directory)
        fingerprint, digest = dataset._fingerprint, base_digest or model_digest(base)
        if not (directory / METADATA).is_file():
            texts = dataset.select_columns([c for c in (text_column, captions_column) if c in dataset.column_names])
            per_sample = [sample_captions(row, text_column, captions_column) for row in texts]
            offsets = np.cumsum([0, *map(len, per_sample)], dtype=np.int64)
            if accelerator.is_main_process:
                cls.allocate(directory, offsets, base.config.projection_dim)
            accelerator.wait_for_everyone()
            captions, images = cls.writable(directory, offsets, base.config.projection_dim)
            share = np.array_split(np.arange(len(per_sample)), accelerator.num_processes)[accelerator.process_index]
            base = base.to(accelerator.device).eval()
            for start in tqdm(range(0, len(share), batch_size), desc="negative bank",
                              disable=not accelerator.is_local_main_process):
                rows = share[start:start + batch_size]
                batch_texts = [text for s in rows for text in per_sample[s]]
                inputs = processor(text=batch_texts, images=dataset[rows.tolist()][image_column], padding="longest",
                                   return_tensors="pt").to(accelerator.device)
                text = base.get_text_features(input_ids=inputs["input_ids"],
                                              attention_mask=inputs.get("attention_mask")).pooler_output
                image = base.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output
                captions[offsets[rows[0]]:offsets[rows[-1] + 1]] = _unit_f16(text)
                images[rows[0]:rows[-1] + 1] = _unit_f16(image)
            captions.flush()
            images.flush()
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                cls.seal(directory, fingerprint, digest)
            accelerator.wait_for_everyone()
        bank = cls(directory)
        bank.check(fingerprint, digest)
        return bank


    @staticmethod
    def allocate(directory: str | Path, offsets: np.ndarray, dim: int) -> None:
        """Create the files of a bank of `len(offsets) - 1` samples whose captions `offsets` delimit (embeddings
        zero until written through `writable`; the bank is usable once `seal` has run)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        samples, captions = len(offsets) - 1, int(offsets[-1])
        for name, rows in (("captions.f16", captions), ("images.f16", samples)):
            with (directory / name).open("wb") as handle:
                handle.truncate(rows * dim * 2)
        np.repeat(np.arange(samples, dtype=np.int32), np.diff(offsets)).tofile(directory / "owners.i32")
        np.asarray(offsets, dtype=np.int64).tofile(directory / "offsets.i64")

    @staticmethod
    def writable(directory: str | Path, offsets: np.ndarray, dim: int) -> tuple[np.memmap, np.memmap]:
        """(captions, images) of an allocated bank, memory-mapped for writing."""
        directory = Path(directory)
        return (np.memmap(directory / "captions.f16", np.float16, "r+", shape=(int(offsets[-1]), dim)),
                np.memmap(directory / "images.f16", np.float16, "r+", shape=(len(offsets) - 1, dim)))

    @staticmethod
    def seal(directory: str | Path, fingerprint: str, base_digest: str) -> None:
        """Mark an allocated and written bank complete, keyed by the data's fingerprint and the base's digest."""
        directory = Path(directory)
        offsets = np.fromfile(directory / "offsets.i64", dtype=np.int64)
        dim = (directory / "images.f16").stat().st_size // 2 // (len(offsets) - 1)
        metadata = {"format": BANK_FORMAT, "fingerprint": fingerprint, "base_model": base_digest,
                    "num_samples": len(offsets) - 1, "num_captions": int(offsets[-1]), "dim": dim}
        write_atomic(directory / METADATA, json.dumps(metadata, indent=1))


def default_bank_directory(cache_root: str | Path, dataset, base_digest: str) -> Path:
    """`<cache_root>/<dataset fingerprint>-<base digest prefix>`: one bank per (data, base) pair."""
    return Path(cache_root) / f"{dataset._fingerprint}-{base_digest[:16]}"


def _unit_f16(embeds: torch.Tensor) -> np.ndarray:
    return F.normalize(embeds.float(), dim=-1).cpu().numpy().astype(np.float16)

