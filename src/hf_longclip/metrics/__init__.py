"""Evaluation metrics: HiMo@K as a function and as `evaluate` metric scripts."""

from .himo import himo_at_k
from .install import METRIC_NAMES, install_metrics, load

__all__ = ["METRIC_NAMES", "himo_at_k", "install_metrics", "load"]
