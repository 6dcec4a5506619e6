"""benchmarks/gpu_suite.py: its peak-FLOPs lookup, batch search, configuration plan and time budget (fast), and the
whole suite in --tiny mode on the CPU, in a subprocess (slow)."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_suite.py"
_spec = importlib.util.spec_from_file_location("gpu_suite", SCRIPT)
gpu_suite = sys.modules["gpu_suite"] = importlib.util.module_from_spec(_spec)  # dataclasses look their module up
_spec.loader.exec_module(gpu_suite)


@pytest.mark.parametrize(("name", "flops", "label"), [
    ("NVIDIA H100 80GB HBM3", 989.4e12, "H100 SXM"),
    ("NVIDIA H100 PCIe", 756e12, "H100 PCIe"),
    ("NVIDIA H200", 989.4e12, "H200"),
    ("NVIDIA A100-SXM4-80GB", 312e12, "A100"),
    ("NVIDIA A100 80GB PCIe", 312e12, "A100"),
])
def test_peak_bf16_flops_from_the_device_name(name, flops, label):
    assert gpu_suite.peak_bf16_flops(name) == (flops, label)


def test_peak_bf16_flops_of_an_unknown_device_is_none():
    flops, label = gpu_suite.peak_bf16_flops("Tesla T4")
    assert flops is None and "--peak_tflops" in label


def test_batch_search_halves_on_out_of_memory_until_it_fits():
    tried, released = [], []

    def attempt(batch):
        tried.append(batch)
        if batch > 100:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if batch == 64:  # a compiled graph's runtime reports it wrapped
            raise RuntimeError("Triton Error [CUDA]: out of memory")

    assert gpu_suite.largest_fitting_batch(attempt, 512, lambda: released.append(tried[-1])) == 32
    assert tried == [512, 256, 128, 64, 32] and released == [512, 256, 128, 64]


def test_batch_search_passes_other_errors_on_and_gives_up_below_one():
    def broken(batch):
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError, match="not a memory problem"):
        gpu_suite.largest_fitting_batch(broken, 512, lambda: None)

    def never_fits(batch):
        raise torch.cuda.OutOfMemoryError("out of memory")

    with pytest.raises(RuntimeError, match="not even a batch of one"):
        gpu_suite.largest_fitting_batch(never_fits, 4, lambda: None)


def test_the_suite_times_every_method_of_the_registry():
    from hf_longclip.recipes.registry import method, method_names

    assert set(method_names()) <= set(gpu_suite.NAMES) and set(gpu_suite.NAMES) == set(gpu_suite.COMPILE_ORDER)
    assert all(gpu_suite.DESCRIPTIONS[name] == method(name).summary for name in method_names())


def test_plan_runs_eager_first_then_compiled_in_priority_order():
    args = gpu_suite.parse_args(["--configs", "fcast,himo/compile,clip248", "--tiny"])
    assert args.plan == ["clip248/eager", "fcast/eager", "clip248/compile", "himo/compile", "fcast/compile"]
    assert gpu_suite.parse_args(["--modes", "compile"]).plan == [f"{name}/compile" for name in gpu_suite.COMPILE_ORDER]
    with pytest.raises(SystemExit):
        gpu_suite.parse_args(["--configs", "vit"])
    with pytest.raises(SystemExit):
        gpu_suite.parse_args(["--configs", "himo", "--profile", "clip248/eager"])


def test_configurations_past_the_time_budget_are_recorded_as_skipped(tmp_path):
    gpu_suite.main(["--tiny", "--configs", "clip248,himo", "--time_budget_s", "0", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert list(report["configs"]) == ["clip248/eager", "himo/eager", "clip248/compile", "himo/compile"]
    assert all(entry["status"] == "skipped" for entry in report["configs"].values())
    assert "skipped: time budget" in (tmp_path / "gpu_suite.md").read_text()


def test_memory_check_compares_the_planner_with_the_step_it_runs(tmp_path):
    """The memory check's CPU path (--tiny): the planner's fake trace against the live tensor bytes of the same
    step run for real, both checkpointing settings, equal to the byte; the markdown table shows every row."""
    suite = gpu_suite.Suite(gpu_suite.parse_args(["--tiny", "--configs", "clip77", "--out", str(tmp_path)]))
    check = gpu_suite.memory_check(suite)
    assert check["status"] == "ok" and check["met"], check
    assert [(row["gradient_checkpointing"], row["batch_size"]) for row in check["rows"]] == \
        [(False, 4), (False, 8), (True, 4), (True, 8)]
    assert all(row["growth_ratio"] == pytest.approx(1.0, abs=1e-9) for row in check["rows"])
    table = "\n".join(gpu_suite.memory_markdown(check))
    assert "Memory check" in table and table.count("\n| o") == 4


def test_memory_check_skipped_past_the_time_budget(tmp_path):
    gpu_suite.main(["--tiny", "--configs", "clip77", "--modes", "eager", "--time_budget_s", "0", "--out",
                    str(tmp_path)])
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert report["memory_check"]["status"] == "skipped"


@pytest.mark.slow
def test_tiny_suite_measures_every_configuration(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(tmp_path), "--profile"],
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_suite.json").read_text())
    expected = {f"{name}/{mode}" for name in gpu_suite.NAMES for mode in ("eager", "compile")}
    assert set(report["configs"]) == expected
    for config, entry in report["configs"].items():
        assert entry["status"] == "ok", (config, entry.get("error"), entry.get("traceback"))
        assert entry["batch_size"] == 4 and len(entry["step_times_ms"]) == 1
        assert math.isfinite(entry["step_time_ms"]) and entry["step_time_ms"] > 0, config
        assert entry["flops_per_step"] > 0 and 0 < entry["mfu"] < 1, config
        assert entry["host_syncs_per_step"] >= 0 and set(entry["sync_events_per_step"]) == set(gpu_suite.SYNC_EVENTS)
    assert math.isfinite(report["configs"]["text_features/eager"]["throughput_ratio"])
    labels = [label for label, *_ in gpu_suite.RATIOS] + ["RoPE text features / CLIPTextModel throughput",
                                                           "CLIP-248 MFU"]
    assert set(report["ratios"]) == {f"{label} ({mode})" for label in labels for mode in ("eager", "compile")}
    assert all(math.isfinite(ratio["value"]) for ratio in report["ratios"].values())
    profile = report["configs"]["onelip/eager"]["profile"]
    assert (tmp_path / profile["trace"]).stat().st_size > 0
    assert "Host syncs" in (tmp_path / profile["summary"]).read_text()
    table = (tmp_path / "gpu_suite.md").read_text()
    assert all(f"| {config} |" in table for config in expected) and "| HiMo / CLIP-248 step (eager) |" in table
    assert report["memory_check"]["status"] == "ok" and report["memory_check"]["met"]
    assert "Memory check: the planner against live tensor bytes" in table
