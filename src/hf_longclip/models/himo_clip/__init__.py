from .configuration_himo_clip import HiMoCLIPConfig
from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor

__all__ = ["HiMoCLIPConfig", "HiMoCLIPModel", "HiMoCLIPProcessor"]
