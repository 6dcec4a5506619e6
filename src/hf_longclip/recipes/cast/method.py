"""CAST as the registry knows it (`hf_longclip.recipes.registry`): superpixel-token image classification."""

from hf_longclip.models.cast.configuration_cast import CASTVisionConfig
from hf_longclip.models.cast.modeling_cast import CASTForImageClassification
from hf_longclip.recipes.cast.card import CARD
from hf_longclip.recipes.cast.task import ClassificationTask
from hf_longclip.recipes.registry import Method


def _cast(size, options):
    model = CASTForImageClassification(CASTVisionConfig(**size.cast_config(), num_labels=options.num_labels))
    return model, ClassificationTask(model, None)


def _batch(size, rows, inputs, options) -> dict:
    """ImageClassificationCollator's: images, their superpixel label maps and class labels."""
    return {"pixel_values": inputs.images(rows), "superpixels": inputs.superpixels(rows),
            "labels": inputs.labels(rows, options.num_labels)}


METHODS = (
    Method("cast", "CAST (ClassificationTask): superpixel-token image classification, cross-entropy", _cast, _batch,
           unavailable=lambda size: None if size.cast else "CAST is defined at CAST-B's width (ViT-B/16)",
           script="examples/train_cast.py", card=CARD, options_used=("num_labels",)),
)
