"""F-CAST: CAST vision tower, hierarchical text encoder, text-grounded pooling. The architecture alone; what trains it
is `hf_longclip.recipes.fcast`."""

from .configuration_fcast import FCASTConfig, FCASTTextConfig
from .modeling_fcast import FCASTGroundingOutput, FCASTModel, FCASTTextOutput
from .processing_fcast import FCASTProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": FCASTConfig, "AutoModel": FCASTModel,
                "AutoModelForZeroShotImageClassification": FCASTModel, "AutoProcessor": FCASTProcessor}


__all__ = ["AUTO_CLASSES", "FCASTConfig", "FCASTGroundingOutput", "FCASTModel", "FCASTProcessor", "FCASTTextConfig",
           "FCASTTextOutput"]
