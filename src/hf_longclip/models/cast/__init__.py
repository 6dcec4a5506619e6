from ...training.hub import ModelCardInfo
from .configuration_cast import CASTVisionConfig
from .image_processing_cast import CASTImageProcessor, compute_superpixels
from .modeling_cast import CASTForImageClassification, CASTVisionModel, CASTVisionOutput

CAST_CARD = ModelCardInfo(
    tags=("cast", "superpixels", "graph-pooling", "image-classification"),
    metric_names={"test_accuracy": "top-1 accuracy (%)"},
    config_rows={"superpixels / segments per stage": ("num_segments", "num_clusters")},
    task_type="image-classification",
    task_name="Shape classification",
)

__all__ = [
    "CAST_CARD",
    "CASTForImageClassification",
    "CASTImageProcessor",
    "CASTVisionConfig",
    "CASTVisionModel",
    "CASTVisionOutput",
    "compute_superpixels",
]
