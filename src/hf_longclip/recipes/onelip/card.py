"""OneLIP's model card: the template beside this file and what the card shows of a run."""

from pathlib import Path

from hf_longclip.training.hub import ModelCardInfo

CARD = ModelCardInfo(
    template=Path(__file__).with_name("model_card.md"),
    tags=("onelip", "long-text", "rope"),
    metric_names={
        "short_r1_i2t": "R@1 image→text, first sentence", "short_r1_t2i": "R@1 text→image, first sentence",
        "hard_r1_i2t": "R@1 image→text, late pairs", "hard_r1_t2i": "R@1 text→image, late pairs",
    },
    config_rows={
        "TRIM alpha / K / r": ("trim_alpha", "trim_top_k", "trim_rank"),
        "lambda 1/2/3 (before / after the switch)": ("weights", "weights_after"),
        "weight switch step": ("weight_switch_step",),
        "token distillation": ("token_distillation",),
    },
)
