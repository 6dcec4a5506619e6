"""Streaming training data from WebDataset shards (issue "Data at the papers' scale", Scale):

1. samples per second per worker, decoded and preprocessed (CLIP image processing at `--image_size`, tokenised
   captions), streamed from shards (`hf_longclip.data.shards.ShardStream`) against the folder loader (a CSV of image
   files read through `datasets`, the map-style path), both in this process, on the same synthetic scenes;
2. peak memory (proportional set size of the main process and its data-loader workers) of a training run of `--steps`
steps over
   100k and 1M samples in shards (copies of one shard of real scenes, hard-linked under distinct names, so that the
   stream, the shuffle buffer and the manifest really span 100k and 1M samples).

    python benchmarks/bench_shards.py
"""

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil
from common import compare

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.data.shards import MANIFEST, ShardStream, shard_source, write_shards
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.miniature import BackboneArguments, base_clip_task
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import make_accelerator, train


def throughput(workdir: Path, scenes, args) -> dict[str, float]:
    """Samples per second of one worker: decode + preprocess a batch, from shards and from image files."""
    shards = workdir / "throughput"
    write_shards(scenes, shards, shard_size=500)
    folder = workdir / "folder"
    folder.mkdir()
    lines = ["image,caption"]
    for index, row in enumerate(scenes):
        row["image"].save(folder / f"{index}.png")
        lines.append(f"{index}.png,\"{row['caption']}\"")
    (folder / "pairs.csv").write_text("\n".join(lines) + "\n")
    files = shard_source(str(folder / "pairs.csv"))
    backbone = BackboneArguments(image_size=args.image_size)
    _, processor = base_clip_task(backbone, {"train": scenes}, 248, seed=0)
    collate = ImageTextCollator(processor)
    urls = [str(path) for path in sorted(shards.glob("*.tar"))]

    def from_shards():
        batch = []
        for row in ShardStream(urls, buffer_size=0):
            batch.append(row)
            if len(batch) == args.batch_size:
                collate(batch)
                batch = []

    def from_files():
        for start in range(0, len(files) - args.batch_size + 1, args.batch_size):
            collate([files[i] for i in range(start, start + args.batch_size)])

    times = compare({"shards": from_shards, "files": from_files}, repeats=3, warmup=1)
    used = len(scenes) // args.batch_size * args.batch_size
    return {name: used / seconds for name, seconds in times.items()}


def replicated_shards(directory: Path, source: Path, copies: int) -> str:
    """`copies` hard links of the one shard `write_shards` wrote into `source`, listed in a manifest of their own
    (each entry the source's: samples, bytes and hash, as the loader verifies them); their brace pattern."""
    manifest = json.loads((source / MANIFEST).read_text())
    (entry,) = manifest["shards"]
    directory.mkdir(parents=True)
    entries = []
    for index in range(copies):
        os.link(source / entry["name"], directory / f"{index:06d}.tar")
        entries.append({**entry, "name": f"{index:06d}.tar"})
    (directory / MANIFEST).write_text(json.dumps({**manifest, "num_samples": entry["samples"] * copies,
                                                  "shards": entries}))
    return str(directory / f"{{000000..{copies - 1:06d}}}.tar")


def peak_training_memory(pattern: str, scenes, args, workdir: Path) -> tuple[float, float]:
    """(peak memory in MiB of the process and its workers, seconds) of `args.steps` training steps on `pattern`:
    proportional set sizes (PSS), which count pages the forked workers share with the process once."""
    loop_args = LoopArguments(output_dir=str(workdir / "run"), max_steps=args.steps, logging_steps=args.steps,
                              per_device_train_batch_size=args.batch_size, warmup_steps=1, train_shards=pattern,
                              dataloader_num_workers=args.workers, shuffle_buffer=1000)
    accelerator = make_accelerator(loop_args)
    task, _ = base_clip_task(BackboneArguments(image_size=64, hidden_size=64), {"train": scenes}, 248, seed=0)
    process, peak, running = psutil.Process(), [0], [True]

    def sample():
        while running[0]:
            try:
                rss = process.memory_full_info().pss + sum(child.memory_full_info().pss
                                                           for child in process.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
            peak[0] = max(peak[0], rss)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    train(task, None, loop_args, accelerator, run_name="bench")
    seconds = time.perf_counter() - start
    running[0] = False
    sampler.join()
    shutil.rmtree(workdir / "run", ignore_errors=True)
    return peak[0] / 2**20, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenes", type=int, default=1000, help="distinct synthetic scenes")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60, help="training steps of each memory run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", default="100000,1000000", help="samples in shards for the memory runs")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench_shards_"))
    scenes = load_synthetic_scenes(num_train=args.scenes, num_test=8, image_size=args.image_size,
                                   cache_dir=str(workdir / "cache"))["train"]
    rates = throughput(workdir, scenes, args)
    print(f"1. decode + preprocess, one worker, {args.image_size} px, batch {args.batch_size}: shards "
          f"{rates['shards']:.0f} samples/s, image files {rates['files']:.0f} samples/s, ratio "
          f"{rates['shards'] / rates['files']:.2f}")
    small = load_synthetic_scenes(num_train=1000, num_test=8, image_size=64, cache_dir=str(workdir / "cache"))["train"]
    one = workdir / "one"
    write_shards(small, one, shard_size=1000)
    for size in (int(s) for s in args.sizes.split(",")):
        pattern = replicated_shards(workdir / f"n{size}", one, size // 1000)
        memory, seconds = peak_training_memory(pattern, small, args, workdir)
        print(f"2. {size:,} samples in {size // 1000} shards: {args.steps} steps of batch {args.batch_size} with "
              f"{args.workers} workers in {seconds:.0f} s, peak memory (PSS, process + workers) {memory:.0f} MiB")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
