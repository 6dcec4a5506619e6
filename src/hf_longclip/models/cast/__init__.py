"""CAST: superpixel tokens and graph pooling (F-CAST's vision tower). The architecture alone; what trains it is
`hf_longclip.recipes.cast`."""

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
