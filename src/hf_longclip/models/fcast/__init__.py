"""F-CAST: CAST vision tower, hierarchical text encoder, text-grounded pooling. The model's own modules; its task,
card, evaluation and figures are modules of this package, imported where used."""

from .configuration_fcast import FCASTConfig, FCASTTextConfig
from .modeling_fcast import FCASTGroundingOutput, FCASTModel, FCASTTextOutput
from .processing_fcast import FCASTProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": FCASTConfig, "AutoModel": FCASTModel, "AutoModelForZeroShotImageClassification": FCASTModel,
                "AutoProcessor": FCASTProcessor}


__all__ = ["AUTO_CLASSES", "FCASTConfig", "FCASTGroundingOutput", "FCASTModel", "FCASTProcessor", "FCASTTextConfig",
           "FCASTTextOutput"]
