"""CAST as the registry knows it (`hf_longclip.recipes.registry`): superpixel-token image classification, and as
examples/train_cast.py trains it: the shape of each synthetic scene's most salient object, against a ViT of equal
width and depth."""

from collections.abc import Sequence

from accelerate.utils import set_seed
from PIL.Image import Resampling
from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessorPil

from hf_longclip.data.synthetic import CLASSNAMES, SHAPES
from hf_longclip.models.cast.configuration_cast import CASTVisionConfig
from hf_longclip.models.cast.image_processing_cast import CASTImageProcessor
from hf_longclip.models.cast.modeling_cast import CASTForImageClassification
from hf_longclip.recipes.cast.card import CARD
from hf_longclip.recipes.cast.task import ClassificationTask, ImageClassificationCollator, accuracy
from hf_longclip.recipes.registry import Method

# name: the classifier train_cast.py trains: CAST, or the ViT of equal width and depth it is compared with
VARIANTS = {"cast": dict(vision="cast"), "vit": dict(vision="vit")}


def _cast(size, options):
    model = CASTForImageClassification(CASTVisionConfig(**size.cast_config(), num_labels=options.num_labels))
    return model, ClassificationTask(model, None)


def _batch(size, rows, inputs, options) -> dict:
    """ImageClassificationCollator's: images, their superpixel label maps and class labels."""
    return {"pixel_values": inputs.images(rows), "superpixels": inputs.superpixels(rows),
            "labels": inputs.labels(rows, options.num_labels)}


def shape_label(row: dict) -> int:
    """Index in SHAPES of the most salient object's shape (the scene's class label is 'colour shape')."""
    return SHAPES.index(CLASSNAMES[row["label"]].split()[-1])


def model_inputs(model) -> tuple[str, ...]:
    """What each classifier reads: CAST its superpixels too."""
    return ("pixel_values", "superpixels") if isinstance(model, CASTForImageClassification) else ("pixel_values",)


def image_processor(start: str | None, image_size: int, num_segments: int | None,
                    superpixel_method: str) -> CASTImageProcessor:
    """CAST's image processor: at `image_size` with `num_segments` superpixels (None: scaled from 196 at 224 px), or
    at the resolution and superpixels of the CAST checkpoint `start`."""
    if start:
        config = CASTVisionConfig.from_pretrained(start)
        image_size, num_segments = config.image_size, config.num_segments
    return CASTImageProcessor(size=image_size, num_segments=num_segments, superpixel_method=superpixel_method)


def build_variant(variant: str, start: str | None, processor: CASTImageProcessor, seed: int = 0,
                  image_size: int = 96, hidden_size: int = 64, num_attention_heads: int = 4,
                  num_clusters: Sequence[int] = (16, 8, 4), vit_patch_size: int = 16) -> tuple:
    """(task, image processor) of train_cast.py's `variant` (a name of `VARIANTS`), initialised from `seed`: CAST from
    the checkpoint `start` with a new classifier head, or from scratch (`start` None; `num_clusters` segments after
    each graph pooling, superpixels as `processor` computes them), or the ViT (`vit_patch_size` patches, `processor`'s
    resizing and normalisation without superpixels); both `hidden_size` wide with `num_attention_heads` heads and one
    block per CAST stage."""
    set_seed(seed)
    depth = len(num_clusters) + 1  # one block per CAST stage
    common = dict(hidden_size=hidden_size, num_attention_heads=num_attention_heads, intermediate_size=4 * hidden_size,
                  num_labels=len(SHAPES), hidden_act="gelu")
    if VARIANTS[variant]["vision"] == "cast" and start:
        model = CASTForImageClassification.from_pretrained(start, num_labels=len(SHAPES),
                                                           ignore_mismatched_sizes=True)  # a new head
    elif VARIANTS[variant]["vision"] == "cast":
        config = CASTVisionConfig(image_size=image_size, num_segments=processor.num_segments, depths=[1] * depth,
                                  num_clusters=num_clusters, **common)
        model = CASTForImageClassification(config)
    else:
        config = ViTConfig(image_size=image_size, patch_size=vit_patch_size, num_hidden_layers=depth,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)
        # ViT's own processor with CAST's resizing and normalisation: the same pixels, no superpixels to compute
        processor = ViTImageProcessorPil(size={"height": image_size, "width": image_size},
                                         resample=Resampling.BICUBIC, image_mean=processor.image_mean,
                                         image_std=processor.image_std)
        model = ViTForImageClassification(config)
    collate = ImageClassificationCollator(processor, shape_label, model_inputs(model))
    return ClassificationTask(model, collate), collate.image_processor


def evaluate_shapes(model, processor, rows) -> dict:
    """A classifier's top-1 accuracy on the shape of `rows`' most salient objects, read through `processor`, and its
    parameter count."""
    collate = ImageClassificationCollator(processor, shape_label, model_inputs(model))
    return {"test_accuracy": accuracy(model, collate, rows), "parameters": sum(p.numel() for p in model.parameters())}


METHODS = (
    Method("cast", "CAST (ClassificationTask): superpixel-token image classification, cross-entropy", _cast, _batch,
           unavailable=lambda size: None if size.cast else "CAST is defined at CAST-B's width (ViT-B/16)",
           script="examples/train_cast.py", variants=VARIANTS, card=CARD, evaluate=evaluate_shapes,
           build_variant=build_variant, options_used=("num_labels",)),
)
