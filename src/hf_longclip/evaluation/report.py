"""`hf-longclip eval`: a model evaluated on a benchmark, its report and plots written to a directory.

    hf-longclip eval --model PATH_OR_ID --dataset urban1k --data-dir data/Urban1k --output-dir eval/urban1k

Every result speaks one vocabulary of metric names: the metric first, then the direction (``r1_i2t``, ``r5_t2i``,
``ties_i2t``, ``num_queries_t2t``), in these reports, the evaluate modules, the example scripts' results and their
tables (`hf_longclip.training.results.COLUMNS`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from ..data.caption_files import describe_truncation
from ..data.eval_datasets import SYNTHETIC, check_data_dir, load_eval_benchmark
from ..data.synthetic import CLASSNAMES
from ..metrics.ties import check_tie_rule
from ..metrics.zero_shot import DEFAULT_TEMPLATES
from ..plots import coverage, plot_prefix_similarity, plot_recalls
from .encoding import reset_truncation_stats, truncation_stats
from .loading import load_model
from .scoring import DEFAULT_TOPK, check_scoring
from .tasks import evaluate_dataset
from .ties import OFFICIAL, TIE_RULE_CHOICES

logger = logging.getLogger(__name__)


def run_evaluation(model_name_or_path: str, dataset_name: str, data_dir: str | None = None,
                   output_dir: str | Path = "eval", split: str | None = None, max_samples: int | None = None,
                   tasks: Sequence[str] | None = None, batch_size: int = 64, device: str | None = None,
                   progress: bool = True, trust_remote_code: bool = False, protocol: str | None = None,
                   scoring: str = "global", topk: int = DEFAULT_TOPK, tie_rule: str = OFFICIAL) -> dict:
    """Evaluate a model on a benchmark; write `report.json` and the plots into `output_dir`; return the report.
    `trust_remote_code`: let a checkpoint that needs code of its own run it (`load_model`); `protocol`: the
    benchmark's file layout and reading (`hf_longclip.data.benchmarks.BENCHMARKS[name].protocols`); `scoring` and
    `topk`: the retrieval task's scoring mode (`hf_longclip.evaluation.scoring`); `tie_rule`: how the metrics
    credit tied scores: ``"official"`` (default) each task as the benchmark protocol's own evaluation code, or one
    rule for every task (`hf_longclip.evaluation.ties`). All are recorded in the report, the rule each task used under
    ``tie_rules``.

    The report also counts what did not reach the metrics as given: ``num_skipped_images`` and ``skipped_images``
    (the records whose image did not decode, by reason, the first ones named; `data.image_files`, whose policy
    `HF_LONGCLIP_BAD_SAMPLES=error` stops instead) and ``caption_truncation`` (the texts the processor cut to the
    model's length, and by how many tokens; also logged once)."""
    check_tie_rule(tie_rule, TIE_RULE_CHOICES)
    protocol = check_data_dir(dataset_name, data_dir, protocol)  # before the model loads: fails at once
    model, processor = load_model(model_name_or_path, device, trust_remote_code)
    check_scoring(model, scoring, topk)  # before the benchmark loads
    benchmark = load_eval_benchmark(dataset_name, data_dir, split, max_samples, protocol)
    dataset, split, num_skipped = benchmark.dataset, benchmark.split, benchmark.num_skipped
    classnames = CLASSNAMES if dataset_name == SYNTHETIC else None
    templates = benchmark.templates or DEFAULT_TEMPLATES
    reset_truncation_stats(processor)
    metrics = evaluate_dataset(model, processor, dataset, tasks, batch_size, progress, classnames, templates, scoring,
                               topk, tie_rule, benchmark=dataset_name, protocol=protocol)
    truncation = truncation_stats(processor)
    logger.info("%s on %s (%s): %s", Path(str(model_name_or_path)).name, dataset_name, split,
                describe_truncation(truncation))
    report = {"model": str(model_name_or_path), "dataset": dataset_name, "protocol": protocol, "split": split,
              "num_samples": len(dataset), "num_skipped_images": num_skipped,
              "skipped_images": benchmark.skipped or {"count": num_skipped, "by_reason": {}, "examples": []},
              "caption_truncation": truncation, "scoring": scoring,
              "tie_rule": tie_rule,
              "tie_rules": {task: result["tie_rule"] for task, result in metrics.items() if "tie_rule" in result},
              "metrics": metrics, "plots": []}
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
    """A `report.json` written by `run_evaluation` (or a directory holding one)."""
    path = Path(path)
    path = path / "report.json" if path.is_dir() else path
    return json.loads(path.read_text())
