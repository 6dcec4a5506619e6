"""What trains F-CAST (and FLAIR): its task (part/whole sigmoid losses over sub-captions), the pretraining of its
bases, the variants train_fcast.py compares (`method`), the grounding evaluation and figures, the Hub card
information, and readings of how its two terms share the text encoder."""

from hf_longclip.data.superpixels import with_superpixels
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.recipes.fcast.card import CARD
from hf_longclip.recipes.fcast.diagnostics import sub_caption_similarity, term_readings
from hf_longclip.recipes.fcast.evaluation import evaluate_scenes, grounding_scores, sentence_attention
from hf_longclip.recipes.fcast.method import (
    METHODS,
    PAPER_ROWS,
    evaluate_bases,
    fitting_variants,
    has_part_level,
    pretrained_bases,
    sub_caption_collator,
    sub_caption_processors,
    variant_options,
)
from hf_longclip.recipes.fcast.plots import plot_attention_maps, plot_grounding
from hf_longclip.recipes.fcast.task import FCASTCollator, FCASTPretrainingTask, FCASTTask, start_from_base

__all__ = ["CARD", "METHODS", "PAPER_ROWS", "FCASTCollator", "FCASTPretrainingTask", "FCASTTask", "evaluate_bases",
           "evaluate_scenes", "fitting_variants", "grounding_scores", "has_part_level", "plot_attention_maps",
           "plot_grounding", "pretrained_bases", "sentence_attention", "start_from_base",
           "sub_caption_collator", "sub_caption_processors", "sub_caption_similarity", "term_readings",
           "train_scene_tokenizer", "variant_options", "with_superpixels"]
