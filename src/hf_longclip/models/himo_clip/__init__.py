"""HiMo-CLIP: a CLIP with 248 text positions trained with MoLo (HiDe components). The model's own modules; its
task, card, evaluation and figures are modules of this package, imported where used."""

from .configuration_himo_clip import HiMoCLIPConfig
from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": HiMoCLIPConfig, "AutoModel": HiMoCLIPModel,
                "AutoModelForZeroShotImageClassification": HiMoCLIPModel, "AutoProcessor": HiMoCLIPProcessor}


__all__ = ["AUTO_CLASSES", "HiMoCLIPConfig", "HiMoCLIPModel", "HiMoCLIPProcessor"]
