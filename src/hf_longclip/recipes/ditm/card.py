"""DITM's model card: the template beside this file and what the card shows of a run."""

from pathlib import Path

from hf_longclip.training.hub import ModelCardInfo

CARD = ModelCardInfo(
    template=Path(__file__).with_name("model_card.md"),
    tags=("ditm",),
    metric_names={"r1_i2t": "R@1 I2T", "r1_t2i": "R@1 T2I", "rsum": "RSUM", "precision": "HierarCaps P",
                  "recall": "HierarCaps R", "d_corr": "d_corr (root)", "d_corr_image": "d_corr (image)"},
    config_rows={"tau / lambda": ("margin_scale", "order_weight")},
)
