"""CAST: superpixel tokens and graph pooling (F-CAST's vision tower). The model's own modules; its task, card and
figures are modules of this package, imported where used."""

from .configuration_cast import CASTVisionConfig
from .image_processing_cast import CASTImageProcessor, compute_superpixels
from .modeling_cast import CASTForImageClassification, CASTVisionModel, CASTVisionOutput

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": CASTVisionConfig, "AutoModel": CASTVisionModel,
                "AutoModelForImageClassification": CASTForImageClassification, "AutoImageProcessor": CASTImageProcessor}


__all__ = [
    "AUTO_CLASSES",
    "CASTForImageClassification",
    "CASTImageProcessor",
    "CASTVisionConfig",
    "CASTVisionModel",
    "CASTVisionOutput",
    "compute_superpixels",
]
