"""Per-sample Online Hard Negative Mining (PO-HNM, OneLIP Sec. 3.2, Eq. 8-9) at the paper's scale: one queue of M
negative captions per training sample, mined with faiss from the negative bank
(`hf_longclip.recipes.onelip.negative_bank`), kept on disk, refreshed by Eq. 9, checkpointed with the run.

    queues = HardNegativeQueues(bank, directory, queue_size=1024, update_steps=2000)
    queues.initialise(accelerator)                       # fresh run: mine every queue once
    embeds, mask = queues.negatives(rows)                # the batch's queued negatives, for the loss
    queues.refresh(rows, image_embeds, text_embeds, step)  # Eq. 9 for the batch's samples that are due

Choices where the paper is silent (each tested):

- Embeddings. Z_hat_text^neg is the base encoder's projected, L2-normalised embedding of the negative caption (its
  first T_f tokens): the bank. Z_img and Z_text^agg in Eq. 8 are the anchor's image embedding and its image-free
  long-text embedding (the projected end-of-text state, what OneLIP's retrieval uses; see
  `hf_longclip.objectives.onelip`), both under the model being trained, without gradient. Then
  d = <beta Z_img + (1 - beta) Z_text, Z_hat_neg>, so the queue is the inner-product neighbourhood of that query.
- Loss. The queued negatives join the image-to-text denominator of Eq. 1 (they are captions), with their bank
  embeddings and the model's temperature; they get no gradient (the base encoder is frozen), the image does.
- Initial fill, eager: before the first step every queue is filled with the top-M captions by d under the base
  model (the bank's image and caption embeddings), skipping the captions of the sample's own image. This is also
  the whole of offline HNM (Table 4's "+HNM"), which is never refreshed.
- Refresh, lazy: a sample's queue is re-scored when the sample is next in a batch at least `update_steps` optimizer
  steps after its last refresh, with the embeddings that batch's forward pass computed anyway; an eager refresh
  would re-encode the whole dataset every T_update steps. Negatives that are easy (d <= theta) or stagnant
  (|d - d_prev| < delta) are replaced by the best-ranked captions not already queued, not just dropped and not of
  the sample's own image; kept ones store d as their new d_prev. The refreshed queue enters the loss from the
  sample's next appearance (its re-scoring needs that forward pass).
- Storage: 6 bytes per stored negative, the caption's int32 row in the bank and its d_prev as float16 (Eq. 9
  compares differences of 0.05; float16 keeps d to 5e-4), plus one int32 "refreshed at step" per sample, in one
  file shared by the processes of a node (each writes only its batch's rows, which are disjoint across processes
  within a step, and before the step's gradient all-reduce, which orders them before any later read of the same
  row). Multi-node runs need the directory on a shared file system.
- Search: exact inner product (`IndexFlatIP`) up to `exact_limit` bank captions; above it an IVF index with 8-bit
  scalar quantisation (about 1,024 captions per list, `nprobe` lists searched), whose memory is one byte per
  dimension and whose search cost per query stays flat as the bank grows. A new negative's d_prev is the index's
  score (exact for the flat index, within about 1e-3 for SQ8). The GPU index is used where faiss has GPUs.
  faiss is the extra `hf-longclip[mining]`: imported when the queues are made, so that a run without it stops
  before training.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from hf_longclip.modeling_common.optional import require
from hf_longclip.recipes.onelip.negative_bank import NegativeBank

QUEUE_DTYPE = np.dtype([("index", "<i4"), ("difficulty", "<f2")])  # one stored negative: 6 bytes
EMPTY = -1  # index of an empty queue slot
QUEUE_FILE = "queues.bin"


def _faiss():
    """The faiss module (the extra `hf-longclip[mining]`), or ImportError naming it."""
    return require("faiss", "mining", "faiss-cpu", "OneLIP's PO-HNM mining")


def difficulty(image: torch.Tensor, text: torch.Tensor, negatives: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 8: d = beta cos(Z_img, Z_neg) + (1 - beta) cos(Z_text, Z_neg) for L2-normalised `image`, `text` (B, P)
    and `negatives` (B, M, P); returns (B, M)."""
    return torch.einsum("bp,bmp->bm", beta * image + (1 - beta) * text, negatives)


def keep_mask(current: torch.Tensor, previous: torch.Tensor, theta: float, delta: float) -> torch.Tensor:
    """Eq. 9: I_keep = 1 iff the negative is hard (d_current > theta) and still evolving (|d_prev - d_current| >=
    delta); easy or stagnant negatives are replaced."""
    return (current > theta) & ((previous - current).abs() >= delta)


class QueueStore:
    """The queues on disk, one fixed-size row per sample: its "refreshed at" step (int32) then its M stored
    negatives (`QUEUE_DTYPE`). `read`/`write` touch only the given rows, with positioned reads and writes
    (`os.pread`/`os.pwrite`), so memory does not grow with the dataset. (A memory map would fault in every page a
    batch touches: 100 times slower on a fresh file here.)"""

    def __init__(self, directory: str | Path, num_samples: int, queue_size: int):
        self.directory = Path(directory)
        self.num_samples, self.queue_size = num_samples, queue_size
        self.row_dtype = np.dtype([("refreshed_at", "<i4"), ("negatives", QUEUE_DTYPE, (queue_size,))])
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / QUEUE_FILE
        size = num_samples * self.row_dtype.itemsize
        if not self.path.is_file() or self.path.stat().st_size != size:
            with self.path.open("wb") as handle:  # a sparse file of the right size; every row is written before use
                handle.truncate(size)
        self._fd = os.open(self.path, os.O_RDWR)

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)

    def read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indices int64 (B, M), d_prev float32 (B, M), refreshed_at int64 (B,)) of `rows`."""
        width = self.row_dtype.itemsize
        data = b"".join(os.pread(self._fd, width, int(row) * width) for row in rows)
        entries = np.frombuffer(data, dtype=self.row_dtype, count=len(rows))
        negatives = entries["negatives"]
        return (negatives["index"].astype(np.int64), negatives["difficulty"].astype(np.float32),
                entries["refreshed_at"].astype(np.int64))

    def write(self, rows: np.ndarray, indices: np.ndarray, difficulties: np.ndarray, step: int) -> None:
        entries = np.empty(len(rows), self.row_dtype)
        entries["refreshed_at"] = step
        entries["negatives"]["index"], entries["negatives"]["difficulty"] = indices, difficulties
        width = self.row_dtype.itemsize
        for row, entry in zip(rows, entries):
            os.pwrite(self._fd, entry.tobytes(), int(row) * width)

    def save(self, directory: Path) -> None:
        """Copy the store into `directory` (a checkpoint being written), read through the open file: the live
        queues are saved even if their file was deleted meanwhile."""
        directory.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.dup(self._fd), "rb") as source, (directory / QUEUE_FILE).open("wb") as target:
            source.seek(0)
            shutil.copyfileobj(source, target)

    def load(self, directory: Path) -> None:
        """Replace the store's content by the copy in `directory` (a checkpoint), written through the open file."""
        with (directory / QUEUE_FILE).open("rb") as source, os.fdopen(os.dup(self._fd), "r+b") as target:
            target.seek(0)
            shutil.copyfileobj(source, target)
            target.truncate()


class NegativeIndex:
    """Inner-product nearest neighbours over the bank's caption embeddings (see the module docstring)."""

    def __init__(self, bank: NegativeBank, exact_limit: int = 65536, nprobe: int = 16):
        faiss = _faiss()
        count, dim = len(bank.captions), bank.dim
        if count <= exact_limit:
            index = faiss.IndexFlatIP(dim)
        else:
            lists = max(1, count // 1024)
            index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, lists, faiss.ScalarQuantizer.QT_8bit,
                                                  faiss.METRIC_INNER_PRODUCT)
            sample = np.linspace(0, count - 1, min(count, 64 * lists)).astype(np.int64)  # 64 points per list
            index.train(np.asarray(bank.captions[sample], dtype=np.float32))
            index.nprobe = nprobe
        for chunk in bank.caption_chunks():
            index.add(chunk)
        if hasattr(faiss, "index_cpu_to_all_gpus") and faiss.get_num_gpus() > 0:
            index = faiss.index_cpu_to_all_gpus(index)
        self.index = index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, indices), each (n, k), best first; index -1 where fewer than k were found."""
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, self.index.ntotal))


class HardNegativeQueues:
    """PO-HNM's per-sample queues over a `NegativeBank` (see the module docstring). `online=False` is offline HNM:
    the initial fill, never refreshed. Sec. 4.1's defaults: M = 1024, T_update = 2000, beta = 0.6, theta = 0.4,
    delta = 0.05. `directory` holds the live store; `save`/`load` copy it into and out of checkpoints."""

    def __init__(self, bank: NegativeBank, directory: str | Path, queue_size: int = 1024, update_steps: int = 2000,
                 beta: float = 0.6, theta: float = 0.4, delta: float = 0.05, online: bool = True,
                 exact_limit: int = 65536, nprobe: int = 16):
        if queue_size < 1 or update_steps < 1 or not 0.0 <= beta <= 1.0:
            raise ValueError(f"PO-HNM needs queue_size >= 1, update_steps >= 1 and beta in [0, 1], got "
                             f"{queue_size}, {update_steps}, {beta}")
        _faiss()  # its index is built on first use: a missing faiss stops the run here, before training
        self.bank, self.queue_size, self.update_steps = bank, queue_size, update_steps
        self.beta, self.theta, self.delta, self.online = beta, theta, delta, online
        self.store = QueueStore(directory, bank.num_samples, queue_size)
        self._index_options = dict(exact_limit=exact_limit, nprobe=nprobe)
        self._index = None
        self._caption_embeds = None  # the bank's caption embeddings as a tensor, on the device of the last batch
        self._widest_image = int(np.diff(bank.offsets).max())  # most captions of one image: all may rank first

    def options(self) -> dict:
        """PO-HNM's hyper-parameters (Sec. 4.1's names: M, T_update, beta, theta, delta; offline HNM: `online` off)."""
        return {"queue_size": self.queue_size, "update_steps": self.update_steps, "beta": self.beta,
                "theta": self.theta, "delta": self.delta, "online": self.online}

    @property
    def index(self) -> NegativeIndex:
        if self._index is None:
            self._index = NegativeIndex(self.bank, **self._index_options)
        return self._index

    def _mine(self, rows: np.ndarray, queries: np.ndarray, exclude: np.ndarray, count: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """The `count` best captions by inner product with `queries` (n, P) for samples `rows`, skipping captions
        of the sample's own image and those in `exclude` (n, E; EMPTY entries ignored): (indices, d) (n, count),
        EMPTY / 0 where the bank has too few."""
        k = count + self._widest_image + exclude.shape[1]
        scores, found = self.index.search(queries, k)
        owners = np.where(found >= 0, self.bank.owners[np.maximum(found, 0)], -1)
        usable = (found >= 0) & (owners != rows[:, None])
        if exclude.shape[1]:
            span = np.int64(len(self.bank.owners) + 1)  # one key per (row, caption) pair
            keys = np.arange(len(rows), dtype=np.int64)[:, None] * span
            usable &= ~np.isin(keys + found, (keys + exclude)[exclude >= 0])
        order = np.argsort(~usable, axis=1, kind="stable")[:, :count]  # usable first, in the index's rank order
        picked = np.take_along_axis(usable, order, axis=1)
        indices = np.where(picked, np.take_along_axis(found, order, axis=1), EMPTY)
        return indices, np.where(picked, np.take_along_axis(scores, order, axis=1), 0.0)

    def _anchors(self, rows: np.ndarray) -> np.ndarray:
        """beta Z_img + (1 - beta) Z_text under the base model (the bank): the query of the initial fill."""
        image = np.asarray(self.bank.images[rows], dtype=np.float32)
        text = np.asarray(self.bank.captions[self.bank.offsets[rows]], dtype=np.float32)
        return self.beta * image + (1 - self.beta) * text

    def initialise(self, accelerator: Accelerator | None = None, batch_size: int = 4096) -> None:
        """Fill every queue with its top-M negatives under the base model; each process mines a contiguous share
        of the samples (with a progress bar on the main one)."""
        rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
        if accelerator is not None:
            accelerator.wait_for_everyone()  # every process has created (opened) the store before anyone writes
        share = np.array_split(np.arange(self.bank.num_samples), world)[rank]
        for start in tqdm(range(0, len(share), batch_size), desc="PO-HNM initial mining",
                          disable=accelerator is not None and not accelerator.is_local_main_process):
            rows = share[start:start + batch_size]
            indices, scores = self._mine(rows, self._anchors(rows), np.empty((len(rows), 0), np.int64),
                                         self.queue_size)
            self.store.write(rows, indices, scores, 0)
        if accelerator is not None:
            accelerator.wait_for_everyone()

    def negatives(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The queued negatives of samples `rows`: bank embeddings (B, M, P) float16 (zero in empty slots) and
        which slots are filled (B, M), on `rows`' device. The gather runs there: on a GPU the bank's caption
        embeddings are copied to it once (1.2 GB at ShareGPT4V's 1.2M captions); on the CPU they stay
        memory-mapped and only the rows gathered are read."""
        if self._caption_embeds is None or self._caption_embeds.device != rows.device:
            mapped = np.memmap(self.bank.directory / "captions.f16", np.float16, "c", shape=self.bank.captions.shape)
            self._caption_embeds = torch.from_numpy(mapped).to(rows.device)  # copy-on-write: the file stays as is
        indices = torch.from_numpy(self.store.read(rows.cpu().numpy())[0]).to(rows.device)
        filled = indices >= 0
        embeds = self._caption_embeds[indices.clamp_min(0)]
        return embeds.masked_fill_(~filled[..., None], 0), filled

    @torch.no_grad()
    def refresh(self, rows: torch.Tensor, image_embeds: torch.Tensor, text_embeds: torch.Tensor,
                negative_embeds: torch.Tensor, step: int) -> dict[str, int]:
        """Eq. 9 for the samples of `rows` whose queue is due (`update_steps` optimizer steps or more since its last
        refresh): re-score their negatives (`negative_embeds`, as `negatives` returned them) with the batch's
        L2-normalised `image_embeds` and `text_embeds` (B, P), keep the hard and evolving ones, fill the rest
        with newly mined captions. Returns how many queues were refreshed and negatives replaced."""
        rows_np = rows.cpu().numpy()
        indices, previous, refreshed_at = self.store.read(rows_np)
        due = (step - refreshed_at >= self.update_steps) & self.online
        if not due.any():
            return {"queues_refreshed": 0, "negatives_replaced": 0}
        due_rows = torch.from_numpy(np.flatnonzero(due))
        image, text = image_embeds.float().cpu()[due_rows], text_embeds.float().cpu()[due_rows]
        negative_embeds = negative_embeds.cpu()
        current = torch.cat([  # 64 rows at a time: float32 copies of 64 x M x P, not B x M x P
            difficulty(image[part], text[part], negative_embeds[due_rows[part]].float(), self.beta)
            for part in torch.arange(len(due_rows)).split(64)
        ]).numpy()
        indices, previous = indices[due], previous[due]
        keep = keep_mask(torch.from_numpy(current), torch.from_numpy(previous), self.theta, self.delta).numpy()
        queued = indices >= 0
        keep &= queued
        queries = (self.beta * image + (1 - self.beta) * text).numpy()
        fresh, fresh_scores = self._mine(rows_np[due], queries, indices, self.queue_size)
        # kept negatives first (their d becomes d_prev), then the best new ones into the freed slots
        order = np.argsort(~keep, axis=1, kind="stable")
        kept_indices = np.take_along_axis(np.where(keep, indices, EMPTY), order, axis=1)
        kept_scores = np.take_along_axis(np.where(keep, current, 0.0), order, axis=1)
        slot = np.arange(self.queue_size)[None, :] - keep.sum(axis=1, keepdims=True)  # rank among new entries
        new_indices = np.take_along_axis(fresh, np.maximum(slot, 0), axis=1)
        new_scores = np.take_along_axis(fresh_scores, np.maximum(slot, 0), axis=1)
        new_indices = np.where(slot >= 0, new_indices, kept_indices)
        new_scores = np.where(slot >= 0, new_scores, kept_scores)
        self.store.write(rows_np[due], new_indices, new_scores, step)
        return {"queues_refreshed": int(due.sum()), "negatives_replaced": int((queued & ~keep).sum())}

    def save(self, directory: Path, accelerator: Accelerator | None = None) -> None:
        """Copy the queues into `directory` (a checkpoint being written; the main process copies the shared file)."""
        if accelerator is None or accelerator.is_main_process:
            self.store.save(Path(directory))

    def load(self, directory: Path, accelerator: Accelerator | None = None) -> None:
        """Restore the queues saved in `directory` (a checkpoint)."""
        if accelerator is None or accelerator.is_main_process:
            self.store.load(Path(directory))
        if accelerator is not None:
            accelerator.wait_for_everyone()
