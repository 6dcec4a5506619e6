"""DITM: CLIP's towers with GPO image pooling. The architecture alone; what trains it is `hf_longclip.recipes.ditm`."""

from .configuration_ditm import DITMConfig
from .modeling_ditm import DITMModel
from .processing_ditm import DITMProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": DITMConfig, "AutoModel": DITMModel, "AutoModelForZeroShotImageClassification": DITMModel,
                "AutoProcessor": DITMProcessor}


__all__ = ["AUTO_CLASSES", "DITMConfig", "DITMModel", "DITMProcessor"]
