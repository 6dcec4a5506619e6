"""F-CAST's model card: the template beside this file and what the card shows of a run."""

from pathlib import Path

from hf_longclip.training.hub import ModelCardInfo

CARD = ModelCardInfo(
    template=Path(__file__).with_name("model_card.md"),
    tags=("fcast", "cast", "long-text", "grounding"),
    metric_names={
        "hard_r1_i2t": "R@1 image→text, late pairs", "hard_r1_t2i": "R@1 text→image, late pairs",
        "pointing_game": "grounding: pointing game (%)", "box_mass": "grounding: attention mass in the box (%)",
        "map_difference": "grounding: maps' difference between sub-captions of one image (%)",
    },
    config_rows={
        "L_part weight": ("part_loss_weight",),
        "L_part kept out of stage 1 (not the paper's)": ("nonpaper_detach_stage1_from_part_loss",),
        "AttnPool heads / grounding stage": ("pool_heads", "grounding_stage"),
    },
)
