from .configuration_cast import CASTVisionConfig
from .image_processing_cast import CASTImageProcessor, compute_superpixels
from .modeling_cast import CASTForImageClassification, CASTVisionModel, CASTVisionOutput

__all__ = [
    "CASTForImageClassification",
    "CASTImageProcessor",
    "CASTVisionConfig",
    "CASTVisionModel",
    "CASTVisionOutput",
    "compute_superpixels",
]
