"""HiMo-CLIP's model card: the template beside this file and what the card shows of a run."""

from pathlib import Path

from hf_longclip.training.hub import ModelCardInfo

CARD = ModelCardInfo(
    template=Path(__file__).with_name("model_card.md"),
    tags=("himo-clip",),
    metric_names={"himo@2": "HiMo@2", "himo@3": "HiMo@3", "himo@k": "HiMo@K"},
    config_rows={"HiDe tau / MoLo lambda / HiDe scope": ("hide_tau", "molo_lambda", "hide_scope"),
                 "HiDe components re-normalised / gathers with gradient / label smoothing": (
                     "normalize_components", "gather_grad", "label_smoothing"),
                 "objective / image principal components / label smoothing": (
                     "objective", "pca_components", "label_smoothing")},
)
