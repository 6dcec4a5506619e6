"""DITM descriptiveness (Eq. 1-2) as a cached `datasets` column: seconds and peak memory for 100k and 1M synthetic
sentences, and how they grow.

    python benchmarks/bench_descriptiveness.py [--sizes 100000 1000000] [--vocabulary 30000] [--num-proc N]

Sentences are COCO-like: 6 to 16 words (mean 11), about a third of them stop-words, the others drawn from a
Zipf-distributed vocabulary of 30,000 made-up words (seeded, so every run scores the same text). Each size runs in a
fresh interpreter that loads them, written beforehand to an on-disk dataset (a temporary folder), and times
`DescriptivenessScorer().fit_dataset` (two passes: document frequencies, then the raw min / max), the
`add_descriptiveness_column` map with that scorer (batched, writing its cache file), and a second, cached
`add_descriptiveness_column` call (refit + cache load). Memory: the peak resident set size of fit + map (VmHWM, reset
just before them through /proc/self/clear_refs) above the RSS before them, the memory-mapped sentences they read
included, and the peak of Arrow's memory pool (where the counting happens). Linux only.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

import datasets
import numpy as np
import pyarrow as pa

from hf_longclip.recipes.ditm.descriptiveness import DescriptivenessScorer, add_descriptiveness_column

STOP = ("a", "the", "of", "on", "in", "with", "and", "is", "to", "at", "an", "two", "near", "some")


def sentences(n: int, vocabulary: int, seed: int = 0) -> list[str]:
    """`n` seeded synthetic captions (see the module doc)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("bcdfghklmnprstvz")), np.array(list("aeiou"))
    words = np.array(["".join(rng.choice(letters[i % 2]) for i in range(rng.integers(4, 9)))
                      for _ in range(vocabulary)])
    lengths = rng.integers(6, 17, size=n)
    ranks = np.minimum(rng.zipf(1.2, size=int(lengths.sum())) - 1, vocabulary - 1)
    tokens = words[ranks].astype(object)
    stop = rng.random(len(tokens)) < 0.35
    tokens[stop] = np.array(STOP, dtype=object)[rng.integers(0, len(STOP), size=int(stop.sum()))]
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    tokens = tokens.tolist()
    return [" ".join(tokens[bounds[i]:bounds[i + 1]]).capitalize() + "." for i in range(n)]


def status_mib(field: str) -> float:
    """A memory figure of /proc/self/status (VmRSS: resident now, VmHWM: peak resident), in MiB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so that the next peak is the measured call's own."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def child(args) -> None:
    dataset = datasets.load_from_disk(args.child)  # memory-mapped: the sentences are not in RSS yet
    DescriptivenessScorer().fit(["a dog", "a black dog", "two cats"])  # warm-up: imports, kernels
    pool = pa.default_memory_pool()
    reset_peak()
    before, arrow_before = status_mib("VmRSS"), pool.max_memory()
    start = time.perf_counter()
    scorer = DescriptivenessScorer().fit_dataset(dataset, "caption")
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    scored = add_descriptiveness_column(dataset, "caption", scorer=scorer, num_proc=args.num_proc)
    map_seconds = time.perf_counter() - start
    peak_after, arrow_after = status_mib("VmHWM"), pool.max_memory()
    start = time.perf_counter()
    cached = add_descriptiveness_column(dataset, "caption", num_proc=args.num_proc)
    cached_seconds = time.perf_counter() - start
    assert cached.cache_files == scored.cache_files
    values = np.asarray(scored.with_format("numpy")["descriptiveness"][:])
    print(json.dumps({
        "sentences": len(dataset), "vocabulary": len(scorer.vocabulary),
        "fit_seconds": fit_seconds, "map_seconds": map_seconds, "seconds": fit_seconds + map_seconds,
        "cached_call_seconds": cached_seconds,
        "rss_before_mib": before, "peak_rss_delta_mib": peak_after - before,
        "arrow_pool_peak_mib": (arrow_after - arrow_before) / 2**20,
        "score_range": [float(values.min()), float(values.max())], "score_mean": float(values.mean()),
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--vocabulary", type=int, default=30_000)
    parser.add_argument("--num-proc", type=int, default=None)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the dataset folder to measure on
    args = parser.parse_args()
    datasets.disable_progress_bars()
    if args.child:
        child(args)
        return
    results = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as folder:
            datasets.Dataset.from_dict({"caption": sentences(size, args.vocabulary)}).save_to_disk(folder)
            command = [sys.executable, __file__, "--child", folder]
            if args.num_proc:
                command += ["--num-proc", str(args.num_proc)]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
    print(f"cpu: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; num_proc={args.num_proc}")
    print(f"{'sentences':>10} {'vocab':>7} {'fit s':>7} {'map s':>7} {'total s':>8} {'cached s':>9} "
          f"{'peak RSS MiB':>13} {'Arrow peak MiB':>15}")
    for r in results:
        arrow = f"{r['arrow_pool_peak_mib']:.0f}"
        print(f"{r['sentences']:>10} {r['vocabulary']:>7} {r['fit_seconds']:>7.2f} {r['map_seconds']:>7.2f} "
              f"{r['seconds']:>8.2f} {r['cached_call_seconds']:>9.2f} {r['peak_rss_delta_mib']:>13.0f} {arrow:>15}")
    for small, large in itertools.pairwise(results):
        factor = large["sentences"] / small["sentences"]
        print(f"{small['sentences']} -> {large['sentences']} sentences (x{factor:g}): time x"
              f"{large['seconds'] / small['seconds']:.2f}, peak RSS x"
              f"{large['peak_rss_delta_mib'] / max(small['peak_rss_delta_mib'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
