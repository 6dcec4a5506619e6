"""OneLIP: CLIP's vision tower and a RoPE/NTK long text encoder. The architecture alone; what trains it is
`hf_longclip.recipes.onelip`."""

from .configuration_onelip import OneLIPConfig, OneLIPTextConfig
from .modeling_onelip import OneLIPForPreTraining, OneLIPModel, OneLIPTextModel
from .processing_onelip import OneLIPProcessor

# what `hf_longclip` registers with transformers' Auto classes (see `hf_longclip.models.MODEL_FOLDERS`)
AUTO_CLASSES = {"AutoConfig": OneLIPConfig, "AutoModel": OneLIPModel, "AutoModelForPreTraining": OneLIPForPreTraining,
                "AutoModelForZeroShotImageClassification": OneLIPModel, "AutoProcessor": OneLIPProcessor}


__all__ = ["AUTO_CLASSES", "OneLIPConfig", "OneLIPForPreTraining", "OneLIPModel", "OneLIPProcessor", "OneLIPTextConfig",
           "OneLIPTextModel"]
