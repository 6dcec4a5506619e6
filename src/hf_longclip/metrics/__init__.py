"""Evaluation metrics of the four papers as pure functions, and as `evaluate` metric scripts."""

from .cola import cola_multi
from .hierarcaps import hierarcaps, kendall_tau_b, text_pool
from .himo import himo_at_k
from .install import METRIC_NAMES, install_metrics, load
from .retrieval import long_text_retrieval, recall_at_k
from .ssi import ssi
from .zero_shot import (
    CIFAR_TEMPLATES,
    DEFAULT_TEMPLATES,
    IMAGENET_TEMPLATES,
    class_embeddings,
    format_prompts,
    zero_shot_classification,
)

__all__ = [
    "CIFAR_TEMPLATES",
    "DEFAULT_TEMPLATES",
    "IMAGENET_TEMPLATES",
    "METRIC_NAMES",
    "class_embeddings",
    "cola_multi",
    "format_prompts",
    "hierarcaps",
    "himo_at_k",
    "install_metrics",
    "kendall_tau_b",
    "load",
    "long_text_retrieval",
    "recall_at_k",
    "ssi",
    "text_pool",
    "zero_shot_classification",
]
