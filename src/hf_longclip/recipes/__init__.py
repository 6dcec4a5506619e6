"""The research harness: what trains each model, one folder per model (`recipes/<arch>/`: its task and collator,
miniature evaluation protocol, plots and card information), over the one Accelerate loop of `hf_longclip.training`.

This module is the harness's public API for the example scripts: the loop's arguments and the recipe every script
follows (`start_run`, `train_variants`, `run_over_seeds`, `publish`), and the pieces several scripts share: the cached
base CLIP (`base_clip`), Long-CLIP's fine-tuning (`longclip`) and the recall-by-caption-length protocol
(`hf_longclip.evaluation.long_captions`). A model's own pieces are imported from its folder, e.g.
`hf_longclip.recipes.himo_clip`.

Above the model layer: it may import `hf_longclip.models`, never the other way round."""

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.evaluation.long_captions import evaluate_text_lengths, late_difference_pairs
from hf_longclip.plots import coverage, plot_prefix_similarity
from hf_longclip.recipes.base_clip import (
    SHORT_BASE_LENGTH,
    evaluate_base,
    infonce_base,
    load_clip,
    short_caption_base,
)
from hf_longclip.recipes.longclip import FirstSentenceCollator, KeptPositionsTask, LongCLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import whole_model_init
from hf_longclip.training.provenance import provenance
from hf_longclip.training.recipe import (
    BackboneArguments,
    BaseArguments,
    cached_pretraining,
    parse_variants,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
)
from hf_longclip.training.task import ContrastiveTask, saved_options

__all__ = [
    "SHORT_BASE_LENGTH",
    "BackboneArguments",
    "BaseArguments",
    "ContrastiveTask",
    "FirstSentenceCollator",
    "ImageTextCollator",
    "KeptPositionsTask",
    "LongCLIPTask",
    "LoopArguments",
    "cached_pretraining",
    "coverage",
    "evaluate_base",
    "evaluate_text_lengths",
    "infonce_base",
    "late_difference_pairs",
    "load_clip",
    "load_synthetic_scenes",
    "parse_variants",
    "plot_prefix_similarity",
    "provenance",
    "publish",
    "run_over_seeds",
    "saved_options",
    "short_caption_base",
    "start_run",
    "train_variants",
    "warn_synthetic_fine_tuning",
    "whole_model_init",
]
