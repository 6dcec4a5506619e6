"""What trains F-CAST (and FLAIR): its task (part/whole sigmoid losses over sub-captions), the pretraining of its
bases, the grounding evaluation and figures, the Hub card information, and readings of how its two terms share the
text encoder."""

from hf_longclip.data.superpixels import with_superpixels
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.recipes.fcast.card import CARD
from hf_longclip.recipes.fcast.diagnostics import sub_caption_similarity, term_readings
from hf_longclip.recipes.fcast.evaluation import grounding_scores, sentence_attention
from hf_longclip.recipes.fcast.method import METHODS
from hf_longclip.recipes.fcast.plots import plot_attention_maps
from hf_longclip.recipes.fcast.task import FCASTCollator, FCASTPretrainingTask, FCASTTask, start_from_base

__all__ = ["CARD", "METHODS", "FCASTCollator", "FCASTPretrainingTask", "FCASTTask", "grounding_scores",
           "plot_attention_maps", "sentence_attention", "start_from_base", "sub_caption_similarity",
           "term_readings", "train_scene_tokenizer", "with_superpixels"]
