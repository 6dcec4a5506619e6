from ...training.hub import ModelCardInfo
from .configuration_ditm import DITMConfig
from .modeling_ditm import DITMModel
from .processing_ditm import DITMProcessor

DITM_CARD = ModelCardInfo(
    tags=("ditm",),
    metric_names={"i2t_r1": "R@1 I2T", "t2i_r1": "R@1 T2I", "rsum": "RSUM", "precision": "HierarCaps P",
                  "recall": "HierarCaps R", "d_corr": "d_corr (root)", "d_corr_image": "d_corr (image)"},
    config_rows={"tau / lambda": ("margin_scale", "order_weight")},
)

__all__ = ["DITM_CARD", "DITMConfig", "DITMModel", "DITMProcessor"]
