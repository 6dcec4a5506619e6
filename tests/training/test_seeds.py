"""Runs over several seeds (`--seeds`): the per-cell mean, std and 95% interval, the table, and the runner that gives
each seed its own seed and output directory."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.results import format_table, summarize_seeds
from hf_longclip.training.runs import HubArguments, run_over_seeds

RUNS = {  # hand-made results of three seeds
    0: {"clip": {"r1": 40.0, "himo@k": 0.80}, "himo": {"r1": 42.0, "himo@k": 0.90}},
    1: {"clip": {"r1": 44.0, "himo@k": 0.84}, "himo": {"r1": 43.0, "himo@k": 0.86}},
    2: {"clip": {"r1": 42.0, "himo@k": 0.82}, "himo": {"r1": 47.0, "himo@k": 0.88}},
}


def test_mean_std_and_interval_by_hand():
    summary = summarize_seeds(RUNS, ["r1", "himo@k"])
    clip = summary["clip"]["r1"]
    # mean 42; deviations -2, 2, 0 -> sample variance (4 + 4 + 0) / 2 = 4, std 2; t(0.975, 2) = 4.303
    assert clip["mean"] == pytest.approx(42.0) and clip["std"] == pytest.approx(2.0)
    assert clip["ci95"] == pytest.approx(4.303 * 2.0 / math.sqrt(3))
    assert clip["n"] == 3 and clip["values"] == [40.0, 44.0, 42.0]
    himo = summary["himo"]["r1"]  # 42, 43, 47: mean 44, variance (4 + 1 + 9) / 2 = 7
    assert himo["mean"] == pytest.approx(44.0) and himo["std"] == pytest.approx(math.sqrt(7))
    assert summary["himo"]["himo@k"]["std"] == pytest.approx(0.02)


def test_one_seed_has_no_spread():
    cell = summarize_seeds({5: RUNS[0]}, ["r1"])["clip"]["r1"]
    assert (cell["mean"], cell["std"], cell["ci95"], cell["n"]) == (40.0, 0.0, 0.0, 1)


def test_seeds_must_report_the_same_variants():
    with pytest.raises(ValueError, match="seed 1 reports variants"):
        summarize_seeds({0: RUNS[0], 1: {"clip": RUNS[1]["clip"]}}, ["r1"])


def test_table_shows_mean_and_std():
    table = format_table(summarize_seeds(RUNS, ["r1", "himo@k"]), ["r1", "himo@k"])
    assert "42.000±2.000" in table and "0.820±0.020" in table
    assert "40.000" in format_table(summarize_seeds({0: RUNS[0]}, ["r1"]), ["r1"])  # one seed: the value alone
    assert "±" not in format_table(summarize_seeds({0: RUNS[0]}, ["r1"]), ["r1"])


@pytest.mark.parametrize(("text", "message"), [("0,a", "comma list of integers"), ("1,1", "distinct")])
def test_bad_seed_lists_fail_at_parse_time(text, message):
    with pytest.raises(ValueError, match=message):
        LoopArguments(seeds=text)


def test_runner_gives_each_seed_its_seed_and_directory(tmp_path, capsys):
    seen = []

    def run(loop_args):
        seen.append((loop_args.seed, loop_args.seeds, loop_args.output_dir))
        return RUNS[loop_args.seed]

    loop_args = LoopArguments(output_dir=str(tmp_path), seeds="0,1,2")
    summary = run_over_seeds(Accelerator(cpu=True), loop_args, HubArguments(), run, ["r1"], name="table5")
    assert seen == [(seed, "", str(tmp_path / f"seed-{seed}")) for seed in (0, 1, 2)]
    assert summary["himo"]["r1"]["mean"] == pytest.approx(44.0)
    report = json.loads((tmp_path / "table5.json").read_text())
    assert report["seeds"] == [0, 1, 2] and report["summary"]["clip"]["r1"]["std"] == pytest.approx(2.0)
    assert report["runs"]["1"] == RUNS[1]
    # where the figures come from: the command, date, machine and versions of the run
    origin = report["provenance"]
    assert origin["seeds"] == [0, 1, 2] and origin["threads"] == torch.get_num_threads() and origin["processes"] == 1
    assert origin["torch"] == torch.__version__ and origin["cpu"] and origin["date"].startswith("20")
    assert origin["wall_seconds"] >= 0 and origin["command"] == " ".join(sys.argv)  # this process's command line
    assert (tmp_path / "table5.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "44.000±2.646" in capsys.readouterr().out


def test_runner_without_seeds_runs_once_in_place(tmp_path):
    seen = []
    loop_args = LoopArguments(output_dir=str(tmp_path), seed=1)
    run_over_seeds(Accelerator(cpu=True), loop_args, HubArguments(), lambda args: seen.append(args) or RUNS[1], ["r1"])
    assert seen == [loop_args]
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == [1]


def test_a_metric_undefined_for_one_seed_is_nan_and_still_plotted(tmp_path):
    from hf_longclip.plots import plot_seed_summary

    runs = {0: {"a": {"ssi": float("nan")}, "b": {"ssi": 3.0}}, 1: {"a": {"ssi": 2.0}, "b": {"ssi": 5.0}}}
    summary = summarize_seeds(runs, ["ssi"])
    assert math.isnan(summary["a"]["ssi"]["mean"]) and summary["b"]["ssi"]["mean"] == 4.0
    assert plot_seed_summary(summary, ["ssi"], tmp_path / "nan.png").read_bytes()[:4] == b"\x89PNG"
    nothing = summarize_seeds({0: {"a": {"ssi": float("nan")}}}, ["ssi"])
    assert plot_seed_summary(nothing, ["ssi"], tmp_path / "none.png").is_file()


def test_runner_refuses_to_push_several_seeds(tmp_path):
    loop_args = LoopArguments(output_dir=str(tmp_path), seeds="0,1")
    with pytest.raises(SystemExit, match="push one seed"):
        run_over_seeds(Accelerator(cpu=True), loop_args, HubArguments(push_to_hub=True, hub_model_id="org/name"),
                       lambda args: RUNS[args.seed], ["r1"])


def test_the_commit_is_the_source_checkouts_and_none_for_an_installed_copy_inside_another_repository(tmp_path):
    """A results JSON names the commit the code ran from; an installed copy (here: inside a virtual environment that
    lies in a user's own repository) names none rather than the user's commit."""
    import importlib.util
    import shutil

    from hf_longclip.training import provenance

    source = Path(provenance.__file__)
    if (source.parents[3] / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", provenance.git_commit())
    project = tmp_path / "project"
    installed = project / ".venv/lib/python3/site-packages/hf_longclip/training/provenance.py"
    installed.parent.mkdir(parents=True)
    shutil.copy(source, installed)
    git = ["git", "-C", str(project), "-c", "user.name=user", "-c", "user.email=user@example.com"]
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the user's own work"], check=True)
    spec = importlib.util.spec_from_file_location("installed_provenance", installed)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert copy.git_commit() is None
