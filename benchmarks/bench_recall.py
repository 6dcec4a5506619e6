"""`long_text_retrieval` (query chunks) against a naive full-matrix Recall@K: time and peak memory, same inputs.

    python benchmarks/bench_recall.py [--num-images 10000] [--captions-per-image 1] [--dim 512] [--rounds 3]
    python benchmarks/bench_recall.py --num-images 30000 --captions-per-image 5 --only chunked --rounds 1

Each measurement runs in a fresh interpreter (one per implementation and round, alternating) that builds the same
random unit vectors from a fixed seed, warms the implementation up on a small problem, then reads its resident set
size (RSS, /proc/self/statm) just before the call and its peak RSS (ru_maxrss) just after: the difference is the
memory the call itself needed at its peak. The children run with MALLOC_MMAP_THRESHOLD_=1 MiB so that freed tensors
go back to the OS and RSS follows the live tensors. Linux only.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

from hf_longclip.metrics import long_text_retrieval

KS = (1, 5, 10)


def naive_retrieval(images: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor, ks=KS) -> dict:
    """The full (num_images, num_texts) similarity matrix, computed once and ranked both ways."""
    similarity = images @ texts.T
    positive = similarity[owner, torch.arange(len(owner))]
    best = torch.full((len(images),), -torch.inf).scatter_reduce(0, owner, positive, reduce="amax")
    ranks = {"i2t": (similarity > best[:, None]).sum(dim=1), "t2i": (similarity > positive[None, :]).sum(dim=0)}
    result = {f"r{k}_{name}": (rank < k).double().mean().item() * 100 for name, rank in ranks.items() for k in ks}
    result["rsum"] = sum(result.values())
    return {**result, "num_images": len(images), "num_texts": len(texts)}


def unit_vectors(n: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, dim, generator=generator)
    return x.div_(x.norm(dim=1, keepdim=True))


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(args) -> None:
    generator = torch.Generator().manual_seed(0)
    images = unit_vectors(args.num_images, args.dim, generator)
    owner = torch.arange(args.num_images).repeat_interleave(args.captions_per_image)
    # captions near their image (cosine ~0.15), so that recalls are neither 0 nor 100; built in place, in slices,
    # so that no temporary outgrows the call's own peak
    texts = unit_vectors(len(owner), args.dim, generator).mul_(6)
    for lo in range(0, len(owner), 4096):
        texts[lo : lo + 4096] += images[owner[lo : lo + 4096]]
    texts.div_(texts.norm(dim=1, keepdim=True))
    if args.child == "chunked":
        run = lambda: long_text_retrieval(images, texts, owner, ks=KS, chunk_size=args.chunk_size)  # noqa: E731
    else:
        run = lambda: naive_retrieval(images, texts, owner, ks=KS)  # noqa: E731
    small = unit_vectors(512, args.dim, generator)  # warm-up: one-time allocations (thread pools, BLAS buffers)
    (long_text_retrieval if args.child == "chunked" else naive_retrieval)(small, small, torch.arange(512), ks=KS)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    before = rss_mib()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_delta_mib": peak_after - before,
                      "peak_is_the_call": peak_after > peak_before, "result": result}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-images", type=int, default=10_000)
    parser.add_argument("--captions-per-image", type=int, default=1)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--chunk-size", type=int, default=None, help="default: 2**24 scores per chunk")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("chunked", "naive"), default=None)
    parser.add_argument("--child", choices=("chunked", "naive"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    names = [args.only] if args.only else ["naive", "chunked"]
    # a fixed mmap threshold: glibc then maps every allocation >= 1 MiB and unmaps it when freed (by default the
    # threshold grows after each free, up to 32 MiB, and freed blocks stay in the heap), so RSS follows the tensors
    env = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), **os.environ}
    runs = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            command = [sys.executable, __file__, "--child", name] + sys.argv[1:]
            proc = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    num_texts = args.num_images * args.captions_per_image
    print(f"device: cpu ({torch.get_num_threads()} threads), {args.num_images} images x {num_texts} captions "
          f"({args.captions_per_image} per image), dim {args.dim}, {args.rounds} fresh processes each")
    summary = {}
    for name, measured in runs.items():
        assert all(m["peak_is_the_call"] for m in measured), "a peak came before the call: memory not measured"
        summary[name] = (statistics.median(m["seconds"] for m in measured),
                         statistics.median(m["peak_delta_mib"] for m in measured))
        print(f"{name:8s} median {summary[name][0]:7.2f} s   peak memory of the call {summary[name][1]:8.1f} MiB   "
              f"R@1 i2t {measured[0]['result']['r1_i2t']:.2f} t2i {measured[0]['result']['r1_t2i']:.2f}")
    full_matrix = args.num_images * num_texts * 4 / 2**20
    print(f"(one float32 full similarity matrix: {full_matrix:.0f} MiB)")
    if len(runs) == 2:
        naive, chunked = runs["naive"][0]["result"], runs["chunked"][0]["result"]
        assert {key: chunked[key] for key in naive} == naive, "the two implementations disagree"
        print("results identical: yes")
        print(f"time ratio chunked / naive: {summary['chunked'][0] / summary['naive'][0]:.2f}   "
              f"memory ratio chunked / naive: {summary['chunked'][1] / summary['naive'][1]:.3f}")


if __name__ == "__main__":
    main()
