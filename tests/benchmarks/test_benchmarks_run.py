"""Every CPU benchmark of benchmarks/ runs to the end at its smallest settings, in a fresh interpreter (one for all)
from an empty working directory: a benchmark is not kept by a test of its figures (those are measured, not
asserted), so without this one it breaks unseen when the code it times moves (four had, all at once). A script is
either run here or named in `NOT_RUN` with the reason; a new script must be one of the two."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# script -> its smallest settings ({tmp} is the test's temporary directory)
SMALL = {
    "bench_cast.py": "--images 2 --repeats 1 --batch_size 1",
    "bench_demo_index.py": "--images 2 --batch-size 1 --repeats 1 --threads 1 --output {tmp}/demo_index.json",
    "bench_descriptiveness.py": "--sizes 1000 --vocabulary 100",
    "bench_ditm_loss.py": "--batch-size 8 --captions-per-image 2 --repeats 1",
    "bench_fcast.py": "--batch_size 1 --width 64 --heads 2 --repeats 1",
    "bench_flair_scoring.py": "--images 1 --texts 16 --topk 2 --pairs_per_chunk 16 --rounds 1",
    "bench_himo_step.py": "--batch-size 4 --text-length 16 --repeats 1",
    "bench_onelip.py": "--batch_size 4 --repeats 1",
    "bench_onnx.py": "--batch_size 1 --repeats 1 --threads 1",
    "bench_padding.py": "--batch-size 2 --repeats 1",
    "bench_pohnm.py": "--samples 5000 --queue_size 16 --dim 32 --batch_size 8 --mine_samples 64 --repeats 1 "
                      "--workdir {tmp}/pohnm",
    "bench_shards.py": "--scenes 16 --image_size 32 --batch_size 4 --steps 1 --workers 0 --sizes 1000",
    "bench_text_features.py": "--batch-size 2 --text-length 16 --repeats 1",
}
NOT_RUN = {
    "common.py": "the benchmarks' shared helpers, not a benchmark",
    "gpu_suite.py": "tests/benchmarks/test_gpu_suite.py runs it whole with --tiny",
    "bench_planner.py": "a real ViT-L/14 step: about 20 minutes at its only size",
    "bench_checkpoint.py": "a ViT-L/14 + AdamW checkpoint: minutes and gigabytes at its only size",
    "bench_compile.py": "compiles eight steps with Inductor: 36 s at its smallest on a warm cache, more on a cold one; "
                        "every step compiling without a graph break is tests/training/test_compile.py's",
    "bench_cli.py": "times `hf-longclip` commands in fresh interpreters: 40 s at its smallest, its commands tested "
                    "in tests/cli",
    "bench_import.py": "times imports in fresh interpreters: 35 s at its smallest, `import hf_longclip` tested in "
                       "tests/packaging",
    "bench_gradcache.py": "27 s at its smallest; gradient caching's equality is tests/training/test_gradient_cache.py",
    "bench_recall.py": "its memory check needs more than its 512-vector warm-up: 20 s at its smallest; the recall "
                       "it times is tests/metrics'",
}


def test_every_benchmark_is_run_here_or_says_why_not():
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(SMALL) | set(NOT_RUN) and not set(SMALL) & set(NOT_RUN)


# one interpreter runs them all, each as `python <script> <args>` would (`runpy`, its own argv): the imports of torch
# and transformers are paid once rather than once a script
RUNNER = """
import runpy, sys, traceback
benchmarks, failed = sys.argv[1], []
sys.path.insert(0, benchmarks)  # their shared `common`, as a script's own folder is
for line in sys.argv[2:]:
    sys.argv = [f"{benchmarks}/{line.split()[0]}", *line.split()[1:]]
    print(f"=== {line}", flush=True)
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as done:
        if done.code not in (None, 0):
            failed.append(line.split()[0])
    except Exception:
        traceback.print_exc()
        failed.append(line.split()[0])
print("failed:", " ".join(failed) or "none")
"""


@pytest.mark.slow  # about a minute: 5-15 s a script after one import of the library
def test_every_benchmark_runs_at_its_smallest_settings(tmp_path):
    lines = [f"{script} {args.format(tmp=tmp_path)}" for script, args in sorted(SMALL.items())]
    result = subprocess.run([sys.executable, "-c", RUNNER, str(BENCHMARKS), *lines], cwd=tmp_path,
                            capture_output=True, text=True, timeout=900,
                            env=dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_CACHE=str(tmp_path / "datasets")))
    assert result.returncode == 0 and "failed: none" in result.stdout, result.stdout[-3000:] + result.stderr[-4000:]
