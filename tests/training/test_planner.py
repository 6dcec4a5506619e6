"""The memory planner (`hf_longclip.training.memory`, `hf_longclip.recipes.planner`, `hf-longclip plan`) at the tiny
size: the step traced on fake tensors, its fit in the batch, ZeRO's sharding, the CLI, and docs/training.md's table
in step with the planner's JSON. Fast: no training is launched; the agreement with a measured step at real size is
benchmarks/bench_planner.py's (CPU) and benchmarks/gpu_suite.py's memory check (GPU)."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from hf_longclip import cli
from hf_longclip.recipes.planner import PlanSettings, format_plan, plan_memory, step_workload
from hf_longclip.recipes.registry import SIZES, method, method_names
from hf_longclip.training import loop
from hf_longclip.training.memory import (
    CATEGORIES,
    Sharding,
    StepTracker,
    TrainingStep,
    measured_step_peak,
    trace_step_memory,
    with_host_values,
)

REPO = Path(__file__).resolve().parents[2]
TINY = dict(size="tiny", bank_captions=1000, hard_negatives=16)


def trace(settings: PlanSettings, batch_sizes=None):
    return trace_step_memory(lambda: step_workload(settings),
                             settings.step_options(), batch_sizes or settings.traced_batch_sizes)


@pytest.fixture(scope="module")
def himo_fp32():
    """One trace of the tiny HiMo-CLIP step in fp32 over 8 processes' gather, at batches 2, 4, 6."""
    settings = PlanSettings(method="himo", precision="fp32", processes=8, **TINY)
    return settings, trace(settings, (2, 4, 6))


def test_tracker_counts_by_category_after_each_operator():
    """MemTracker's count (each storage once while it lives) by category after every operator; a trained
    parameter's gradient counted as a gradient, a frozen parameter (which MemTracker would hook, and autograd
    refuses) with none."""
    column = {name: index for index, name in enumerate(CATEGORIES)}
    model = torch.nn.Sequential(torch.nn.Linear(16, 16, bias=False), torch.nn.Linear(16, 16, bias=False))
    model[1].requires_grad_(False)  # 1 KiB of weights each
    tracker = StepTracker()
    tracker.track_model(model)
    with tracker:
        tracker.recording = True
        inputs = torch.ones(4, 16)  # 256 bytes
        inputs[:2].add_(1)  # a view, in place: no new storage
        model(inputs).sum().backward()
        tracker.recording = False
    events = np.stack(tracker.events)
    assert events[0, column["activations"]] == events[1, column["activations"]] == 256
    assert (events[:, column["weights"]] == 2048).all() and len(events) > 4
    assert tracker.live()[column["gradients"]] == 1024
    assert tracker.live("peak").sum() == events.sum(axis=1).max()


def test_fake_tensors_read_on_the_host_give_their_recorded_values():
    with FakeTensorMode(), StepTracker():
        index = with_host_values(torch.arange(4), [3, 1, 2, 0])
        assert index.tolist() == [3, 1, 2, 0]
        assert bool((index >= 0).all())  # no recorded value: what valid data gives an input check


def test_the_planner_traces_the_loops_step(monkeypatch):
    """No copy of the step: the trace runs `loop.optimizer_step`, once for the first step and once per batch."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[2])
        return optimizer_step(*args, **kwargs)

    optimizer_step = loop.optimizer_step
    monkeypatch.setattr(loop, "optimizer_step", counted)
    trace(PlanSettings(method="himo", **TINY), (2, 3))
    assert [len(batch["input_ids"]) for batch in calls] == [2, 2, 3]


def test_parts_are_what_adamw_keeps(himo_fp32):
    """fp32: 4 bytes of weight, 4 of gradient and 8 of AdamW's moments a parameter (plus its step counters),
    read from the traced step, not typed in."""
    settings, memory = himo_fp32
    model = step_workload(settings).model
    trained = [param for param in model.parameters() if param.requires_grad]
    rest = memory.at_rest()
    assert rest["weights"] == 4 * sum(param.numel() for param in model.parameters())
    assert memory.gradients() == 4 * sum(param.numel() for param in trained)
    assert rest["optimizer"] == 8 * sum(param.numel() for param in trained) + 4 * len(trained)  # + `step` scalars
    assert memory.parameters == sum(param.numel() for param in model.parameters())


def test_sharding_divides_what_zero_shards(himo_fp32):
    _, memory = himo_fp32
    plain, rest = memory.at_rest(), memory.gradients()
    zero2, zero3, ddp = Sharding(2, 8), Sharding(3, 8), Sharding(0, 8)
    assert memory.at_rest(zero2)["optimizer"] == pytest.approx(plain["optimizer"] / 8)
    assert memory.at_rest(zero2)["weights"] == plain["weights"]
    assert memory.gradients(zero2) == pytest.approx(rest / 8)
    assert memory.at_rest(zero3)["weights"] == pytest.approx(plain["weights"] / 8)
    assert memory.gradients(ddp) == 2 * rest  # DDP's buckets
    assert memory.peak(64, zero3) < memory.peak(64, zero2) < memory.peak(64) < memory.peak(64, ddp)


FITTED_FAST = ("himo", "ditm")  # the fast suite's; the slow one fits every other method of the registry


@pytest.mark.parametrize("method", FITTED_FAST)
def test_fitted_peak_is_the_traced_peak_at_other_batches(method):
    """Every operator's bytes fitted in the batch from three traces give, at four times those batches, the peak a
    trace there finds (exactly: shapes are polynomials of the batch)."""
    settings = PlanSettings(method=method, processes=4, **TINY)
    fitted, direct = trace(settings, (2, 4, 6)), trace(settings, (12, 20))
    assert [fitted.peak(batch) for batch in (12, 20)] == pytest.approx(direct.traced_peaks(), rel=1e-9)
    assert fitted.live_before(20) == pytest.approx(direct.live_before(20), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("method", [name for name in method_names() if name not in FITTED_FAST])
def test_fitted_peak_of_every_method(method):
    settings = PlanSettings(method=method, processes=2, **TINY)
    fitted, direct = trace(settings, (2, 4, 6)), trace(settings, (16, 24))
    assert [fitted.peak(batch) for batch in (16, 24)] == pytest.approx(direct.traced_peaks(), rel=1e-6)


def test_gradient_cache_is_fitted_past_its_traces():
    """Gradient caching's traces differ in length (chunks); the chunk passes and the whole batch's loss are fitted
    apart, and match a trace at a batch twice the largest traced."""
    settings = PlanSettings(method="himo", chunk=4, processes=2, **TINY)
    fitted, direct = trace(settings), trace(settings, (28, 32))
    assert not fitted.aligned
    assert [fitted.peak(batch) for batch in (28, 32)] == pytest.approx(direct.traced_peaks(), rel=1e-3)
    plain = trace(PlanSettings(method="himo", processes=2, **TINY))
    assert fitted.peak(256) < plain.peak(256) / 4  # memory grows with the chunk, not the batch


def test_the_step_traced_is_the_step_run():
    """The same `TrainingStep` on real tensors (bf16 autocast, gradient checkpointing): its live tensor bytes, as
    MemTracker counts them, peak where the fake trace says, to the byte."""
    settings = PlanSettings(method="himo", gradient_checkpointing=True, target="cpu", **TINY)
    memory = trace(settings, (2, 3, 4))
    torch.manual_seed(0)
    workload = step_workload(settings)
    step = TrainingStep(workload, settings.step_options())
    step(workload.make_batch(2))
    measured = measured_step_peak(step, workload.make_batch(3))
    assert measured == pytest.approx(memory.peak(3) - memory.live_before(3), rel=1e-9)


def test_checkpointing_lora_and_locking_lower_what_they_should():
    base = plan_memory(PlanSettings(method="himo", **TINY))
    checkpointed = plan_memory(PlanSettings(method="himo", gradient_checkpointing=True, **TINY))
    locked = plan_memory(PlanSettings(method="himo", lock="image", **TINY))
    lora = plan_memory(PlanSettings(method="himo", lora_r=4, **TINY))
    assert checkpointed.per_sample < base.per_sample
    assert locked.trained_parameters < base.trained_parameters and locked.gradients < base.gradients
    assert lora.trained_parameters < locked.trained_parameters and lora.optimizer < locked.optimizer
    assert base.trained_parameters == base.parameters


def test_onelip_counts_its_teacher_and_queues_as_extra():
    plan = plan_memory(PlanSettings(method="onelip", **TINY))
    size = SIZES["tiny"]
    bank = 1000 * size.projection_dim * 2  # float16 caption embeddings on the device
    assert plan.extra > bank  # + the frozen teacher's weights
    without = plan_memory(PlanSettings(method="onelip", **{**TINY, "hard_negatives": 0}))
    assert plan.extra - without.extra == bank


def test_largest_batch_is_the_largest_that_fits(himo_fp32):
    _, memory = himo_fp32
    budget = memory.peak(37) + 1
    assert memory.largest_batch(budget) == 37
    assert memory.largest_batch(budget, multiple=4) == 36
    assert memory.largest_batch(memory.peak(1) - 1) == 0


def test_settings_refuse_what_the_loop_refuses():
    with pytest.raises(ValueError, match="ZeRO-3"):
        PlanSettings(chunk=8, zero_stage=3, processes=8)
    with pytest.raises(ValueError, match="CAST"):
        PlanSettings(size="ViT-L/14", method="fcast")
    with pytest.raises(ValueError, match="unknown size"):
        PlanSettings(size="ViT-H/14")
    assert PlanSettings(method="molo").method == "himo"


def test_plan_command_prints_every_part_and_writes_json(tmp_path, capsys):
    output = tmp_path / "plan.json"
    cli.main(["plan", "--size", "tiny", "--method", "himo", "--zero-stage", "2", "--processes", "8",
              "--gradient-checkpointing", "--json", str(output)])
    printed = capsys.readouterr().out
    for part in ("weights", "gradients", "optimizer state (AdamW)", "objective's extra", "activations per sample",
                 "largest batch per process", "ZeRO-2 is an assumption", "fragmentation"):
        assert part in printed, part
    assert re.search(r" 80 GB \(\s*71\.1 GiB\): \d+ \(\d+ over 8 processes\)", printed)
    plan = json.loads(output.read_text())
    assert plan["settings"]["zero_stage"] == 2 and set(plan["largest_batch"]) == {"24", "40", "80", "141"}
    assert plan["per_sample"] > 0


def test_plan_command_reports_a_refused_setting_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["plan", "--size", "ViT-L/14", "--method", "fcast"])
    assert exit_info.value.code == 2
    assert "CAST" in capsys.readouterr().err


def test_plan_help_lists_the_registry(capsys):
    """`plan --help` reads its methods and sizes from the registry when shown (no list of its own)."""
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    shown = capsys.readouterr().out
    assert all(f"  {name}: " in shown for name in method_names()) and all(size in shown for size in SIZES)


def test_format_plan_says_what_is_assumed():
    text = format_plan(plan_memory(PlanSettings(method="onelip", processes=2, **TINY)))
    assert "DDP" in text and "PO-HNM" in text and "attention" in text


def fits_script():
    """scripts/fits_table.py, which writes the table (not part of the package)."""
    spec = importlib.util.spec_from_file_location("fits_table", REPO / "scripts" / "fits_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_docs_table_is_the_planners():
    """docs/training.md's "What fits where" table is `fits_table()` of docs/benchmarks/fits.json, which the planner
    wrote for the table's settings (regenerate both: `python scripts/fits_table.py --write-table`)."""
    script = fits_script()
    data = json.loads(script.TABLE_FILE.read_text())
    assert data["columns"] == script.TABLE_SETTINGS
    assert data["cards_gb"] == list(script.TABLE_CARDS)
    expected_rows = [f"{name} {size}" for size in script.TABLE_SIZES for name in method_names()
                     if not method(name).unavailable(SIZES[size])]
    assert list(data["rows"]) == expected_rows
    page = script.TRAINING_DOC.read_text()
    assert f"{script.TABLE_START}\n{script.fits_table(data['rows'])}\n{script.TABLE_END}" in page


@pytest.mark.slow
def test_docs_table_rows_are_what_the_planner_gives_today():
    """One row of the committed table re-traced at full size (ViT-B/16 HiMo-CLIP: about a minute on a CPU)."""
    script = fits_script()
    data = json.loads(script.TABLE_FILE.read_text())
    row = script.table_plans(sizes=("ViT-B/16",), methods=("himo",))["himo ViT-B/16"]
    assert row == data["rows"]["himo ViT-B/16"]
