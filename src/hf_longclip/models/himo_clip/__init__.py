from ...training.hub import ModelCardInfo
from .configuration_himo_clip import HiMoCLIPConfig
from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor

HIMO_CLIP_CARD = ModelCardInfo(
    tags=("himo-clip",),
    metric_names={"himo@2": "HiMo@2", "himo@3": "HiMo@3", "himo@k": "HiMo@K"},
    config_rows={"HiDe tau / MoLo lambda / HiDe scope": ("hide_tau", "molo_lambda", "hide_scope")},
)

__all__ = ["HIMO_CLIP_CARD", "HiMoCLIPConfig", "HiMoCLIPModel", "HiMoCLIPProcessor"]
