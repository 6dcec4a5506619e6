"""hf-longclip: long-text, hierarchy-aware CLIP models for the Hugging Face ecosystem."""

import importlib

import transformers

from .models import MODEL_FOLDERS
from .models.cast import CASTForImageClassification, CASTImageProcessor, CASTVisionConfig, CASTVisionModel
from .models.ditm import DITMConfig, DITMModel, DITMProcessor
from .models.fcast import FCASTConfig, FCASTModel, FCASTProcessor
from .models.himo_clip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from .models.onelip import OneLIPConfig, OneLIPForPreTraining, OneLIPModel, OneLIPProcessor

__version__ = "0.1.0"


def _register(auto_classes: dict) -> None:
    """Make each Auto class resolve our classes (`{"AutoModel": Model, ...}`, the config under "AutoConfig"), and
    make `save_pretrained` write their code next to the weights (`register_for_auto_class`)."""
    config_class = auto_classes["AutoConfig"]
    transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    config_class.register_for_auto_class()
    for auto_name, cls in auto_classes.items():
        if auto_name == "AutoConfig":
            continue
        auto = getattr(transformers, auto_name)
        if auto_name == "AutoImageProcessor":
            auto.register(config_class, image_processor_classes={"pil": cls}, exist_ok=True)
        else:
            auto.register(config_class, cls, exist_ok=True)
        if auto_name != "AutoModelForZeroShotImageClassification":  # its auto_map entry is the model's own saving's
            cls.register_for_auto_class(auto_name)


for _folder in MODEL_FOLDERS:
    _register(importlib.import_module(f"{__name__}.models.{_folder}").AUTO_CLASSES)

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
    "OneLIPForPreTraining",
    "OneLIPModel",
    "OneLIPProcessor",
    "__version__",
]
