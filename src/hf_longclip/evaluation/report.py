"""`hf-longclip eval`: a model evaluated on a benchmark, its report and plots written to a directory.

    hf-longclip eval --model PATH_OR_ID --dataset urban1k --data-dir data/Urban1k --output-dir eval/urban1k
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..data.eval_datasets import check_data_dir, load_eval_dataset
from ..metrics.keys import upgrade_keys
from ..metrics.ties import DEFAULT_TIE_RULE, check_tie_rule
from ..plots import coverage, plot_prefix_similarity, plot_recalls
from .loading import load_model
from .scoring import DEFAULT_TOPK, check_scoring
from .tasks import evaluate_dataset


def run_evaluation(model_name_or_path: str, dataset_name: str, data_dir: str | None = None,
                   output_dir: str | Path = "eval", split: str | None = None, max_samples: int | None = None,
                   tasks: Sequence[str] | None = None, batch_size: int = 64, device: str | None = None,
                   progress: bool = True, trust_remote_code: bool = False, protocol: str | None = None,
                   scoring: str = "global", topk: int = DEFAULT_TOPK, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """Evaluate a model on a benchmark; write `report.json` and the plots into `output_dir`; return the report.
    `trust_remote_code`: let a checkpoint that needs code of its own run it (`load_model`); `protocol`: the
    benchmark's file layout and reading (`hf_longclip.data.benchmarks.BENCHMARKS[name].protocols`); `scoring` and
    `topk`: the retrieval task's scoring mode (`hf_longclip.evaluation.scoring`); `tie_rule`: how every metric
    credits tied scores (`hf_longclip.metrics.ties`). All are recorded in the report."""
    check_tie_rule(tie_rule)
    protocol = check_data_dir(dataset_name, data_dir, protocol)  # before the model loads: fails at once
    model, processor = load_model(model_name_or_path, device, trust_remote_code)
    check_scoring(model, scoring, topk)  # before the benchmark loads
    dataset, split, num_skipped, classnames, templates = load_eval_dataset(dataset_name, data_dir, split,
                                                                           max_samples, protocol)
    metrics = evaluate_dataset(model, processor, dataset, tasks, batch_size, progress, classnames, templates, scoring,
                               topk, tie_rule)
    report = {"model": str(model_name_or_path), "dataset": dataset_name, "protocol": protocol, "split": split,
              "num_samples": len(dataset), "num_skipped_images": num_skipped, "scoring": scoring,
              "tie_rule": tie_rule, "metrics": metrics, "plots": []}
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    name = Path(str(model_name_or_path)).name
    if "retrieval" in metrics:
        report["plots"].append(str(plot_recalls(metrics["retrieval"], output_dir / "recall.png",
                                                f"{name} on {dataset_name} ({split})")))
    if "himo" in metrics:
        himo = metrics["himo"]
        covers = coverage(himo["num_images"], himo["num_prefixes"], "caption prefixes")
        report["plots"].append(str(plot_prefix_similarity({name: himo["mean_similarity_by_prefix"]},
                                                          output_dir / "himo_prefix_similarity.png", covers,
                                                          f"{name} on {dataset_name} ({split})")))
    (output_dir / "report.json").write_text(json.dumps(report, indent=2))
    return report


def load_report(path: str | Path) -> dict:
    """A `report.json` written by `run_evaluation` (or a directory holding one), its metric names in the current
    vocabulary (`hf_longclip.metrics.keys`: a report with the old names, e.g. ``i2t_r1``, is read with a
    DeprecationWarning). A report written before the tie rule was recorded counted ties as hits: its ``tie_rule``
    reads ``"optimistic"``."""
    path = Path(path)
    path = path / "report.json" if path.is_dir() else path
    report = upgrade_keys(json.loads(path.read_text()), str(path))
    report.setdefault("tie_rule", "optimistic")
    return report
