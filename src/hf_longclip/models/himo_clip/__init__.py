"""HiMo-CLIP: a CLIP with 248 text positions (Long-CLIP's stretched table). The architecture alone; what trains it is
`hf_longclip.recipes.himo_clip`."""

from .configuration_himo_clip import HiMoCLIPConfig
from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": HiMoCLIPConfig, "AutoModel": HiMoCLIPModel,
                "AutoModelForZeroShotImageClassification": HiMoCLIPModel, "AutoProcessor": HiMoCLIPProcessor}


__all__ = ["AUTO_CLASSES", "HiMoCLIPConfig", "HiMoCLIPModel", "HiMoCLIPProcessor"]
