from ...training.hub import ModelCardInfo
from .configuration_onelip import OneLIPConfig, OneLIPTextConfig
from .modeling_onelip import OneLIPModel, OneLIPTextModel
from .processing_onelip import OneLIPProcessor

ONELIP_CARD = ModelCardInfo(
    tags=("onelip", "long-text", "rope"),
    metric_names={
        "short_r1_i2t": "R@1 image→text, first sentence", "short_r1_t2i": "R@1 text→image, first sentence",
        "hard_r1_i2t": "R@1 image→text, late pairs", "hard_r1_t2i": "R@1 text→image, late pairs",
    },
    config_rows={
        "TRIM alpha / K / r": ("trim_alpha", "trim_top_k", "trim_rank"),
        "lambda 1/2/3 (warm-up)": ("coarse_weight", "token_weight", "contrastive_weight"),
        "lambda 1/2/3 (after)": ("coarse_weight_after", "token_weight_after", "contrastive_weight_after"),
        "weight switch step": ("weight_switch_step",),
        "token distillation": ("token_distillation",),
    },
)

__all__ = ["ONELIP_CARD", "OneLIPConfig", "OneLIPModel", "OneLIPProcessor", "OneLIPTextConfig", "OneLIPTextModel"]
