from ...training.hub import ModelCardInfo
from .configuration_fcast import FCASTConfig, FCASTTextConfig
from .modeling_fcast import FCASTGroundingOutput, FCASTModel, FCASTTextOutput
from .processing_fcast import FCASTProcessor

FCAST_CARD = ModelCardInfo(
    tags=("fcast", "cast", "long-text", "grounding"),
    metric_names={
        "hard_r1_i2t": "R@1 image→text, late pairs", "hard_r1_t2i": "R@1 text→image, late pairs",
        "pointing_game": "grounding: pointing game (%)", "box_mass": "grounding: attention mass in the box (%)",
    },
    config_rows={
        "L_part weight": ("part_loss_weight",),
        "AttnPool heads / grounding stage": ("pool_heads", "grounding_stage"),
    },
)

__all__ = ["FCAST_CARD", "FCASTConfig", "FCASTGroundingOutput", "FCASTModel", "FCASTProcessor", "FCASTTextConfig",
           "FCASTTextOutput"]
