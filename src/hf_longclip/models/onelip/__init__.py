"""OneLIP: CLIP's vision tower and a RoPE/NTK long text encoder, adapted in one stage (TRIM, PO-HNM). The model's
own modules; its task, card, evaluation and figures are modules of this package, imported where used."""

from .configuration_onelip import OneLIPConfig, OneLIPTextConfig
from .modeling_onelip import OneLIPForPreTraining, OneLIPModel, OneLIPTextModel
from .processing_onelip import OneLIPProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": OneLIPConfig, "AutoModel": OneLIPModel, "AutoModelForPreTraining": OneLIPForPreTraining,
                "AutoModelForZeroShotImageClassification": OneLIPModel, "AutoProcessor": OneLIPProcessor}


__all__ = ["AUTO_CLASSES", "OneLIPConfig", "OneLIPForPreTraining", "OneLIPModel", "OneLIPProcessor", "OneLIPTextConfig",
           "OneLIPTextModel"]
