"""CAST's model card: the template beside this file and what the card shows of a run."""

from pathlib import Path

from hf_longclip.training.hub import ModelCardInfo

CARD = ModelCardInfo(
    template=Path(__file__).with_name("model_card.md"),
    tags=("cast", "superpixels", "graph-pooling", "image-classification"),
    metric_names={"test_accuracy": "top-1 accuracy (%)"},
    config_rows={"superpixels / segments per stage": ("num_segments", "num_clusters")},
    task_type="image-classification",
    task_name="Shape classification",
)
