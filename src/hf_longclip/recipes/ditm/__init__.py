"""What trains DITM: its task over several captions an image (adaptive triplet + ordering, Eq. 7), the
descriptiveness scores that order them, the hierarchy evaluation, plots and the Hub card information."""

from hf_longclip.recipes.ditm.card import CARD
from hf_longclip.recipes.ditm.descriptiveness import DescriptivenessScorer, add_descriptiveness_column
from hf_longclip.recipes.ditm.evaluation import evaluate_hierarchy
from hf_longclip.recipes.ditm.method import BACKBONES, METHODS, base_model_class, with_positives
from hf_longclip.recipes.ditm.plots import LOSS_NOTES, plot_levels
from hf_longclip.recipes.ditm.task import DITMTask, MultiCaptionCollator

__all__ = ["BACKBONES", "CARD", "METHODS", "LOSS_NOTES", "DITMTask", "DescriptivenessScorer", "MultiCaptionCollator",
           "add_descriptiveness_column", "base_model_class", "evaluate_hierarchy", "plot_levels", "with_positives"]
