"""DITM: CLIP's towers with GPO image pooling, trained with the adaptive triplet + ordering objective. The model's
own modules; its task, card, evaluation and figures are modules of this package, imported where used."""

from .configuration_ditm import DITMConfig
from .modeling_ditm import DITMModel
from .processing_ditm import DITMProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": DITMConfig, "AutoModel": DITMModel, "AutoModelForZeroShotImageClassification": DITMModel,
                "AutoProcessor": DITMProcessor}


__all__ = ["AUTO_CLASSES", "DITMConfig", "DITMModel", "DITMProcessor"]
