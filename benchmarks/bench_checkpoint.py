"""Checkpoints cost what a save costs (issue "What fits where", item 4): the time of writing a training checkpoint
through the library's real save path (`hf_longclip.training.checkpoint.save_checkpoint`: `accelerator.save_state`,
the process state, the integrity manifest, fsync, rename, rotation) at ViT-L/14 size with AdamW's state, the share
of it spent on the integrity manifest, and on resume the time of checking the manifest against loading the state.

    python benchmarks/bench_checkpoint.py [--repeats 3] [--json docs/benchmarks/checkpoint.json --label after]

The model is a `HiMoCLIPModel` with ViT-L/14's configuration (vision 1024 wide, 24 layers, patch 14, 224 px; text
768 wide, 12 layers, 248 positions; projection 768; 428 M parameters), built without initialisation and filled
with random numbers; one AdamW step gives the optimizer its two moments, so a checkpoint holds the fp32 weights
(1.7 GB) and the optimizer state (3.4 GB). One process, `Accelerator(cpu=True)`. The manifest's time is measured
by wrapping the functions the save and the resume check call (`checkpoint._manifest`, `checkpoint.checkpoint_problem`),
plus, where the files are hashed while they are written (`checkpoint.HashWhileWriting`), the CPU time of its thread
during the save ("integrity": both, the thread's time counted as if it had all delayed the save), in wall clock and
in CPU seconds of this process (on shared cores the CPU seconds are the steadier figure: other
jobs stretch the wall clock); the save in both, the fsync and `accelerator.load_state` in wall clock (they wait for
the disk). Each repeat writes a new checkpoint (`save_total_limit` 1: the previous one is deleted after the new one
is complete), checks it as a resume does (`resolve_resume`), then hashes its files with both schemes, SHA-256 (the
manifest before XXH3) and XXH3-128, in alternating order: their CPU seconds on the same files in the same run, the
ratio that does not depend on which code wrote the checkpoint. `accelerator.load_state` is timed twice at the end,
for scale. The manifest reads back files the save has just written: from the page cache, unless memory pressure
dropped them (the memory available before each save is recorded; a read from the disk shows as CPU seconds of the
kernel and a longer wall time).

To measure the code before a change, run the script with that code's `src` first on PYTHONPATH (e.g.
`git archive <commit> src | tar -x -C /tmp/before`). With `--json` and `--label`, the results are stored under that
label in the file, the other labels kept; with both "before" and "after" there, their medians are set side by side
("comparison").
"""

import argparse
import functools
import hashlib
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import psutil
import torch
import xxhash
from transformers import initialization as init

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.training import checkpoint
from hf_longclip.training.provenance import provenance

VIT_L14 = dict(
    text_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                     max_position_embeddings=248),
    vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                       patch_size=14, image_size=224),
    projection_dim=768,
)
TINY = dict(  # --tiny: a check of the script in seconds
    text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     max_position_embeddings=248),
    vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       patch_size=14, image_size=224),
    projection_dim=64,
)


class Timed:
    """Wraps `module.name` so that each call's wall and CPU seconds are recorded."""

    def __init__(self, module, name: str):
        self.module, self.name, self.original = module, name, getattr(module, name)
        self.wall, self.cpu = [], []

        @functools.wraps(self.original)
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.wall.append(time.perf_counter() - wall)
                self.cpu.append(time.process_time() - cpu)

        setattr(module, name, timed)

    def take(self) -> tuple[float, float]:
        """(wall, cpu) seconds of the calls since the last take."""
        wall, cpu = sum(self.wall), sum(self.cpu)
        self.wall, self.cpu = [], []
        return wall, cpu


def build(config: dict):
    """A prepared (model, optimizer, scheduler) with AdamW's state after one step."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    with init.no_init_weights():
        model = HiMoCLIPModel(HiMoCLIPConfig(**config))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.02, generator=generator)
            parameter.grad = parameter.detach() * 1e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return accelerator, model


def hash_files(directory: Path, algorithm: str) -> float:
    """CPU seconds of hashing every file of `directory` the way a manifest does (1 MiB reads, the whole file)."""
    cpu = time.process_time()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest, buffer = (xxhash.xxh3_128() if algorithm == "xxh3_128" else hashlib.sha256()), bytearray(1 << 20)
            view = memoryview(buffer)
            with path.open("rb", buffering=0) as handle:
                while read := handle.readinto(buffer):
                    digest.update(view[:read])
    return time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="checkpoints written (and checked)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model instead of ViT-L/14 (checks the script)")
    parser.add_argument("--workdir", type=Path, help="where the checkpoints are written (default: a temporary "
                                                     "directory, removed afterwards)")
    parser.add_argument("--json", type=Path, help="store the results in this file, under --label")
    parser.add_argument("--label", default="run", help="the key of this run's results in --json (before, after)")
    parser.add_argument("--note", default="", help="stored with the results (e.g. the machine's load)")
    args = parser.parse_args()
    environment = provenance(note=args.note) if args.note else provenance()
    print(environment, flush=True)
    start = time.perf_counter()
    accelerator, model = build(TINY if args.tiny else VIT_L14)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{parameters / 1e6:.0f} M parameters, built in {time.perf_counter() - start:.1f} s", flush=True)
    manifest = Timed(checkpoint, "_manifest")
    followers = []  # the HashWhileWriting of each save (code with hashing while writing), for its thread's CPU time
    if hasattr(checkpoint, "HashWhileWriting"):
        class Recorded(checkpoint.HashWhileWriting):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                followers.append(self)

        checkpoint.HashWhileWriting = Recorded
    fsync = Timed(checkpoint, "_fsync_tree")
    verify = Timed(checkpoint, "checkpoint_problem")
    workdir = Path(tempfile.mkdtemp(prefix="bench_checkpoint_", dir=args.workdir))
    rows, loads = [], []
    try:
        for step in range(1, args.repeats + 1):
            available = psutil.virtual_memory().available
            wall, cpu = time.perf_counter(), time.process_time()
            path = checkpoint.save_checkpoint(accelerator, workdir, step, {"epoch": 0, "batches_in_epoch": step},
                                              {"task": {}}, save_total_limit=1)
            save, save_cpu = time.perf_counter() - wall, time.process_time() - cpu
            manifest_wall, manifest_cpu = manifest.take()
            thread_cpu = sum(follower.cpu_seconds for follower in followers)
            followers.clear()
            # integrity: the wait for the manifest after the writes, plus the CPU time the hashing thread took during
            # them (counted in full, as if it had delayed the save by all of it: an upper bound on shared cores)
            integrity, integrity_cpu = manifest_wall + thread_cpu, manifest_cpu + thread_cpu
            fsync_wall, _ = fsync.take()
            size = sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
            wall = time.perf_counter()
            assert checkpoint.resolve_resume(workdir, "latest") == path
            resume_check = time.perf_counter() - wall
            _, verify_cpu = verify.take()
            # the two schemes over the same files, in this run, in alternating order
            order = ("sha256", "xxh3_128") if step % 2 else ("xxh3_128", "sha256")
            schemes = {algorithm: hash_files(path, algorithm) for algorithm in order}
            row = {"bytes": size, "save_s": save, "save_cpu_s": save_cpu, "manifest_s": manifest_wall,
                   "manifest_cpu_s": manifest_cpu, "hashing_thread_cpu_s": thread_cpu, "integrity_s": integrity,
                   "integrity_cpu_s": integrity_cpu, "fsync_s": fsync_wall,
                   "integrity_share_of_save": integrity / save, "integrity_share_of_save_cpu": integrity_cpu / save_cpu,
                   "resume_check_s": resume_check,
                   "verify_cpu_s": verify_cpu, "sha256_cpu_s": schemes["sha256"], "xxh3_128_cpu_s": schemes["xxh3_128"],
                   "memory_available_before_save_gb": available / 1e9,
                   "process_rss_gb": psutil.Process().memory_info().rss / 1e9}
            rows.append(row)
            print(f"save {step}: {size / 1e9:.2f} GB, save {save:.2f} s ({save_cpu:.2f} CPU s), manifest "
                  f"{manifest_wall:.2f} s ({manifest_cpu:.2f} CPU s) + hashing while writing {thread_cpu:.2f} CPU s: "
                  f"{100 * row['integrity_share_of_save']:.1f}% of the save's wall time, "
                  f"{100 * row['integrity_share_of_save_cpu']:.1f}% of its CPU time; fsync "
                  f"{fsync_wall:.2f} s; resume check {resume_check:.2f} s ({verify_cpu:.2f} CPU s); same files: "
                  f"SHA-256 {schemes['sha256']:.2f} CPU s, XXH3-128 {schemes['xxh3_128']:.2f} CPU s; "
                  f"{available / 1e9:.1f} GB available before the save", flush=True)
        for _ in range(2):  # the resume's own cost, for scale (after the saves: its copies would crowd the cache)
            wall = time.perf_counter()
            accelerator.load_state(str(path))
            loads.append(time.perf_counter() - wall)
        print(f"load_state: {', '.join(f'{load:.2f}' for load in loads)} s", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    medians = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    medians["load_state_s"] = statistics.median(loads)
    print({key: round(value, 3) for key, value in medians.items()}, flush=True)
    if args.json:
        results = json.loads(args.json.read_text()) if args.json.exists() else {}
        results[args.label] = {"environment": {**environment, "parameters": parameters,
                                               "model": "tiny" if args.tiny else "ViT-L/14 HiMoCLIPModel + AdamW"},
                               "median": medians, "runs": rows, "load_state_s": loads}
        if "before" in results and "after" in results:  # the figures the issue asks for, side by side
            before, after = results["before"]["median"], results["after"]["median"]
            results["comparison"] = {key: {"before": before[key], "after": after[key]} for key in (
                "save_s", "save_cpu_s", "manifest_s", "manifest_cpu_s", "hashing_thread_cpu_s", "integrity_s",
                "integrity_cpu_s", "integrity_share_of_save", "integrity_share_of_save_cpu", "resume_check_s",
                "verify_cpu_s", "sha256_cpu_s", "xxh3_128_cpu_s", "load_state_s")}
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
