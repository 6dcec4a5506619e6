"""PO-HNM at the paper's scale (issue "OneLIP's PO-HNM at a million samples", Scale): a synthetic negative bank and
queue store of N samples x M negatives (one caption per sample, as ShareGPT4V), measured at each `--samples`:

1. bytes per stored negative (queue file size / (N x M); goal <= 6) and the store's size on disk;
2. the faiss index: build time and the memory it adds;
3. initial mining throughput (samples per second, one process) on `--mine_samples` samples, and the whole
   initial fill it implies;
4. one training step's queue work for `--batch_size` samples (all due for refresh, the worst case): read + gather
   of the negatives' bank embeddings, their logits for the loss (Eq. 1's extra denominator terms), refresh
   (Eq. 8 re-scoring, Eq. 9, mining of the replacements, write); each in ms and against a OneLIP training step of the
   main job's model size (128 wide) at
   the same batch, measured in this process;
5. peak memory during that queue work: anonymous memory (what the process allocates; in total, and above what it
   held before the queue work: torch, the index) and resident file pages of the memory-mapped bank (page cache,
   reclaimable), sampled every millisecond.

    python benchmarks/bench_pohnm.py                                      # 100k and 1M, M = 1024, d = 512
    python benchmarks/bench_pohnm.py --samples 20000 --queue_size 64      # quick look

The bank's vectors are random unit vectors (float16), which is the hardest case for an IVF index (no clusters).
"""

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from common import clip_config, compare, random_batch
from transformers import CLIPModel

from hf_longclip import OneLIPForPreTraining
from hf_longclip.recipes.onelip.hard_negatives import HardNegativeQueues
from hf_longclip.recipes.onelip.negative_bank import NegativeBank
from hf_longclip.recipes.onelip.task import OneLIPTask


class PeakMemory:
    """Peak anonymous and file-backed resident memory of this process while the context runs."""

    def __init__(self):
        self.process, self.anonymous, self.file_pages, self._running = psutil.Process(), 0, 0, False

    def _sample(self):
        while self._running:
            info = self.process.memory_info()
            self.anonymous = max(self.anonymous, info.rss - info.shared)
            self.file_pages = max(self.file_pages, info.shared)
            time.sleep(0.001)

    def __enter__(self):
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._running = False
        self._thread.join()


def synthetic_bank(directory: Path, samples: int, dim: int, seed: int = 0) -> NegativeBank:
    offsets = np.arange(samples + 1, dtype=np.int64)
    NegativeBank.allocate(directory, offsets, dim)
    captions, images = NegativeBank.writable(directory, offsets, dim)
    rng = np.random.default_rng(seed)
    for array in (captions, images):
        for start in range(0, samples, 65536):
            block = rng.standard_normal((min(65536, samples - start), dim), dtype=np.float32)
            array[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        array.flush()
    del captions, images
    NegativeBank.seal(directory, f"synthetic-{samples}", "random")
    return NegativeBank(directory)


def model_step_seconds(batch_size: int, repeats: int) -> float:
    """One OneLIP training step (teacher + TRIM + Eq. 10, backward, AdamW) of the main job's model size."""
    torch.manual_seed(0)
    base = CLIPModel(clip_config(positions=77)).eval()
    model = OneLIPForPreTraining.from_clip(base, max_length=248).train()
    task = OneLIPTask(model, collate_fn=None, teacher=base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = random_batch(batch_size, 248)
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])

    def step():
        sum(task.compute_loss(model, batch).values()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return compare({"step": step}, repeats=repeats, warmup=1)["step"]


def measure(samples: int, args, workdir: Path) -> dict:
    directory = workdir / f"n{samples}"
    shutil.rmtree(directory, ignore_errors=True)
    start = time.perf_counter()
    bank = synthetic_bank(directory / "bank", samples, args.dim)
    bank_seconds = time.perf_counter() - start
    queues = HardNegativeQueues(bank, directory / "queues", queue_size=args.queue_size, update_steps=1)
    before = psutil.Process().memory_info()
    start = time.perf_counter()
    queues.index  # noqa: B018 (builds the faiss index)
    index_seconds = time.perf_counter() - start
    after = psutil.Process().memory_info()
    index_bytes = (after.rss - after.shared) - (before.rss - before.shared)

    rng = np.random.default_rng(1)
    mined = np.sort(rng.choice(samples, args.mine_samples, replace=False))
    start = time.perf_counter()
    for first in range(0, len(mined), 4096):
        rows = mined[first:first + 4096]
        indices, scores = queues._mine(rows, queues._anchors(rows), np.empty((len(rows), 0), np.int64),
                                       args.queue_size)
        queues.store.write(rows, indices, scores, 0)
    mining_rate = len(mined) / (time.perf_counter() - start)

    batches = [torch.from_numpy(rng.choice(mined, args.batch_size, replace=False)) for _ in range(args.repeats)]
    embeds = torch.nn.functional.normalize(torch.randn(args.batch_size, args.dim), dim=-1)
    phases = {"read": [], "score": [], "refresh": []}
    info = psutil.Process().memory_info()
    baseline = info.rss - info.shared  # torch, the index and the mining's leftovers
    with PeakMemory() as memory:
        for step, rows in enumerate(batches, start=1):
            start = time.perf_counter()
            negatives, mask = queues.negatives(rows)
            phases["read"].append(time.perf_counter() - start)
            start = time.perf_counter()
            logits = torch.einsum("bp,bmp->bm", embeds, negatives.float()).masked_fill(~mask, float("-inf"))
            phases["score"].append(time.perf_counter() - start)
            start = time.perf_counter()
            counts = queues.refresh(rows, embeds, embeds, negatives, step)
            phases["refresh"].append(time.perf_counter() - start)
            assert counts["queues_refreshed"] == args.batch_size and torch.isfinite(logits).any()
    queue_file = directory / "queues" / "queues.bin"
    result = {
        "bytes_per_negative": queue_file.stat().st_size / (samples * args.queue_size),
        "store_gib": queue_file.stat().st_size / 2**30, "bank_seconds": bank_seconds,
        "index_seconds": index_seconds, "index_mib": index_bytes / 2**20, "mining_rate": mining_rate,
        **{f"{name}_ms": float(np.median(values)) * 1e3 for name, values in phases.items()},
        "anonymous_mib": memory.anonymous / 2**20, "step_mib": (memory.anonymous - baseline) / 2**20,
        "file_pages_mib": memory.file_pages / 2**20,
    }
    del queues, bank
    shutil.rmtree(directory, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", default="100000,1000000", help="comma list of bank sizes N")
    parser.add_argument("--queue_size", type=int, default=1024, help="M (Sec. 4.1)")
    parser.add_argument("--dim", type=int, default=512, help="embedding width (ViT-B/16: 512)")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--mine_samples", type=int, default=8192, help="samples mined for the throughput figure")
    parser.add_argument("--repeats", type=int, default=5, help="training steps of queue work timed")
    parser.add_argument("--workdir", default=None, help="where the bank and store go (default: a temp dir)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_pohnm_"))
    print(f"{torch.get_num_threads()} threads, M = {args.queue_size}, d = {args.dim}, batch {args.batch_size}")
    results = {}
    for samples in (int(s) for s in args.samples.split(",")):  # first, so that memory is not the model step's
        results[samples] = measure(samples, args, workdir)
        print(f"N = {samples:,}: {results[samples]}", flush=True)
    step = model_step_seconds(args.batch_size, repeats=3)
    print(f"baseline: OneLIP training step, main-job model (128 wide), batch {args.batch_size} x 248 tokens: "
          f"{step * 1e3:.0f} ms")
    header = ("N", "B/neg", "store GiB", "index s", "index MiB", "mine/s", "full fill min", "read ms", "score ms",
              "refresh ms", "queue/step", "peak anon MiB", "of which step MiB", "file MiB")
    rows = []
    for samples, r in results.items():
        queue_ms = r["read_ms"] + r["score_ms"] + r["refresh_ms"]
        rows.append((f"{samples:,}", f"{r['bytes_per_negative']:.2f}", f"{r['store_gib']:.2f}",
                     f"{r['index_seconds']:.1f}", f"{r['index_mib']:.0f}", f"{r['mining_rate']:.0f}",
                     f"{samples / r['mining_rate'] / 60:.1f}", f"{r['read_ms']:.0f}", f"{r['score_ms']:.0f}",
                     f"{r['refresh_ms']:.0f}", f"{queue_ms / (step * 1e3):.2f}", f"{r['anonymous_mib']:.0f}",
                     f"{r['step_mib']:.0f}", f"{r['file_pages_mib']:.0f}"))
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
