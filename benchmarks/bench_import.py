"""The library's import against transformers' (issue "A light model library", item 2: a lean import): seconds until
each statement has run in a fresh interpreter, measured interleaved in one process (`common.compare`, the order
flipped every round) with ratios against `from transformers import CLIPModel`, the baseline:

- `import hf_longclip` (registers every model with transformers' Auto classes);
- `from hf_longclip import HiMoCLIPModel, OneLIPModel`;
- `python -c pass`: the interpreter's own start-up, the floor;
- with `--before`, what `import hf_longclip` cost before the extras (OpenCV and scikit-image were imported at the
  top of CAST's image processor): `import cv2, skimage.segmentation, hf_longclip`.

Goal: both within 10% of the baseline (ratio <= 1.10). Each run is timed by two clocks: wall seconds, and the CPU
seconds of the child process (user + system, `RUSAGE_CHILDREN`), which other jobs on a shared machine inflate less.

    python benchmarks/bench_import.py --repeats 9 --output docs/benchmarks/import.json   # ~3 min on 2 cores
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from common import compare

SRC = str(Path(__file__).resolve().parents[1] / "src")
BASELINE = "from transformers import CLIPModel"
STATEMENTS = ("pass", BASELINE, "import hf_longclip", "from hf_longclip import HiMoCLIPModel, OneLIPModel")
BEFORE = "import cv2, skimage.segmentation, hf_longclip"
GOAL = 1.10


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9, help="timed runs of each statement (median reported)")
    parser.add_argument("--output", help="write the figures as JSON here (default: print only)")
    parser.add_argument("--note", default="", help="a line on the machine's state, kept in the JSON")
    parser.add_argument("--before", action="store_true", help=f"also time the import before the extras: {BEFORE}")
    args = parser.parse_args()
    statements = STATEMENTS + ((BEFORE,) if args.before else ())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
    cpu_seconds = {statement: [] for statement in statements}

    def launcher(statement):
        def run():
            before = children_cpu_seconds()
            subprocess.run([sys.executable, "-c", statement], env=env, check=True, stdout=subprocess.DEVNULL)
            cpu_seconds[statement].append(children_cpu_seconds() - before)
        return run

    load_before = os.getloadavg()
    started = time.perf_counter()
    wall = compare({statement: launcher(statement) for statement in statements}, repeats=args.repeats, warmup=1)
    load_after = os.getloadavg()
    cpu = {statement: statistics.median(values[1:]) for statement, values in cpu_seconds.items()}  # warm-up left out
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after, {os.cpu_count()} CPUs; median of "
          f"{args.repeats} interleaved runs")
    print(f"{'python -c':<52}{'wall s':>8}{'ratio':>8}{'CPU s':>8}{'ratio':>8}")
    for statement in statements:
        print(f"{statement:<52}{wall[statement]:>8.2f}{wall[statement] / wall[BASELINE]:>8.3f}"
              f"{cpu[statement]:>8.2f}{cpu[statement] / cpu[BASELINE]:>8.3f}")
    result = {
        "script": "benchmarks/bench_import.py",
        "command": "python benchmarks/bench_import.py " + " ".join(sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_average_1min_before": round(load_before[0], 2),
                    "load_average_1min_after": round(load_after[0], 2), "note": args.note},
        "versions": {"python": platform.python_version(), "torch": version("torch"),
                     "transformers": version("transformers"), "accelerate": version("accelerate"),
                     "hf-longclip": version("hf-longclip")},
        "repeats": args.repeats,
        "baseline": BASELINE,
        "goal_ratio_at_most": GOAL,
        "median_wall_s": {statement: round(value, 3) for statement, value in wall.items()},
        "median_cpu_s": {statement: round(value, 3) for statement, value in cpu.items()},
        "ratio_wall": {statement: round(wall[statement] / wall[BASELINE], 3) for statement in statements},
        "ratio_cpu": {statement: round(cpu[statement] / cpu[BASELINE], 3) for statement in statements},
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
