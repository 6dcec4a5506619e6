"""The research harness: what trains each model, one folder per model (`recipes/<arch>/`: its task and collator,
miniature evaluation protocol, plots and card information), over the one Accelerate loop of `hf_longclip.training`.

This module is the harness's public API for the example scripts: the loop's arguments and the run every script
makes (`start_run`, `train_variants`, `run_over_seeds`, `publish`), the one list of methods (`method`, from
`registry`), and the pieces several scripts share: Long-CLIP's fine-tuning (`longclip`) and the recall-by-caption-
length protocol (`hf_longclip.evaluation.long_captions`). A model's own pieces are imported from its folder, e.g.
`hf_longclip.recipes.himo_clip`; the miniature's scaffolding (scratch towers, cached bases) from
`hf_longclip.miniature`.

Above the model layer: it may import `hf_longclip.models`, never the other way round."""

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.evaluation.long_captions import evaluate_text_lengths, late_difference_pairs
from hf_longclip.plots import coverage, plot_prefix_similarity
from hf_longclip.recipes.longclip import FirstSentenceCollator, KeptPositionsTask, LongCLIPTask
from hf_longclip.recipes.registry import method
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import whole_model_init
from hf_longclip.training.provenance import provenance
from hf_longclip.training.runs import (
    Run,
    load_clip,
    parse_variants,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
)
from hf_longclip.training.task import ContrastiveTask, saved_options

__all__ = [
    "ContrastiveTask",
    "FirstSentenceCollator",
    "ImageTextCollator",
    "KeptPositionsTask",
    "LongCLIPTask",
    "LoopArguments",
    "Run",
    "coverage",
    "evaluate_text_lengths",
    "late_difference_pairs",
    "load_clip",
    "method",
    "parse_variants",
    "plot_prefix_similarity",
    "provenance",
    "publish",
    "run_over_seeds",
    "saved_options",
    "start_run",
    "train_variants",
    "warn_synthetic_fine_tuning",
    "whole_model_init",
]
