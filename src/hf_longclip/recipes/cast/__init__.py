"""What trains CAST: image classification on the synthetic scenes' shapes (its task, collator and accuracy), the
segment-hierarchy figures and the Hub card information."""

from hf_longclip.data.synthetic import SHAPES
from hf_longclip.recipes.cast.card import CARD
from hf_longclip.recipes.cast.method import METHODS, image_processor
from hf_longclip.recipes.cast.plots import plot_hierarchy, plot_segment_hierarchies
from hf_longclip.recipes.cast.task import ClassificationTask, ImageClassificationCollator, accuracy

__all__ = ["CARD", "METHODS", "SHAPES", "ClassificationTask", "ImageClassificationCollator", "accuracy",
           "image_processor", "plot_hierarchy", "plot_segment_hierarchies"]
