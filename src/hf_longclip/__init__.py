"""hf-longclip: long-text, hierarchy-aware CLIP models for the Hugging Face ecosystem."""

from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForZeroShotImageClassification,
    AutoProcessor,
)

from .models.cast import (
    CASTForImageClassification,
    CASTImageProcessor,
    CASTVisionConfig,
    CASTVisionModel,
)
from .models.ditm import DITMConfig, DITMModel, DITMProcessor
from .models.fcast import FCASTConfig, FCASTModel, FCASTProcessor
from .models.himo_clip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from .models.onelip import OneLIPConfig, OneLIPModel, OneLIPProcessor

__version__ = "0.1.0"


def _register(config_class, model_class, processor_class) -> None:
    """Make Auto* resolve our classes, and make `save_pretrained` write their code next to the weights."""
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, model_class, exist_ok=True)
    AutoModelForZeroShotImageClassification.register(config_class, model_class, exist_ok=True)
    AutoProcessor.register(config_class, processor_class, exist_ok=True)
    config_class.register_for_auto_class()
    model_class.register_for_auto_class("AutoModel")
    processor_class.register_for_auto_class("AutoProcessor")


def _register_vision(config_class, model_class, classifier_class, image_processor_class) -> None:
    """`_register` for a vision-only backbone: AutoModel, AutoModelForImageClassification, AutoImageProcessor."""
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, model_class, exist_ok=True)
    AutoModelForImageClassification.register(config_class, classifier_class, exist_ok=True)
    AutoImageProcessor.register(config_class, image_processor_classes={"pil": image_processor_class}, exist_ok=True)
    config_class.register_for_auto_class()
    model_class.register_for_auto_class("AutoModel")
    classifier_class.register_for_auto_class("AutoModelForImageClassification")
    image_processor_class.register_for_auto_class("AutoImageProcessor")


_register(HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor)
_register(DITMConfig, DITMModel, DITMProcessor)
_register(OneLIPConfig, OneLIPModel, OneLIPProcessor)
_register(FCASTConfig, FCASTModel, FCASTProcessor)
_register_vision(CASTVisionConfig, CASTVisionModel, CASTForImageClassification, CASTImageProcessor)

__all__ = [
    "CASTForImageClassification",
    "CASTImageProcessor",
    "CASTVisionConfig",
    "CASTVisionModel",
    "DITMConfig",
    "DITMModel",
    "DITMProcessor",
    "FCASTConfig",
    "FCASTModel",
    "FCASTProcessor",
    "HiMoCLIPConfig",
    "HiMoCLIPModel",
    "HiMoCLIPProcessor",
    "OneLIPConfig",
    "OneLIPModel",
    "OneLIPProcessor",
    "__version__",
]
