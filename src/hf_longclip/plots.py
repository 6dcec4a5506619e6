"""Figures of evaluation and training results (matplotlib, Agg backend, PNG files); the metrics they show are
computed in `hf_longclip.evaluation` and `hf_longclip.metrics`.

    plot_prefix_similarity({"himo-clip": curve}, "prefix.png")   # HiMo-CLIP Fig. 3
    plot_loss_curves({"himo-clip": trainer_log_history}, "loss.png")
    plot_recalls(report["retrieval"], "recall.png")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(fig, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def plot_prefix_similarity(curves: dict[str, Sequence[float]], path: str | Path, title: str = "") -> Path:
    """Save a PNG of mean image-text similarity against the number of caption sentences, one line per model
    (HiMo-CLIP Fig. 3)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, marker="o", label=name)
    ax.set_xlabel("caption prefix length (sentences)")
    ax.set_ylabel("mean cosine similarity with the image")
    ax.set_title(title or "Semantic monotonicity: similarity vs. caption completeness")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save_figure(fig, path)


def plot_loss_curves(histories: dict[str, Sequence[dict]], path: str | Path) -> Path:
    """Save a PNG of the training loss against the optimizer step, one line per run (records with a "loss")."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, history in histories.items():
        logged = [record for record in history if "loss" in record]
        ax.plot([record["step"] for record in logged], [record["loss"] for record in logged], label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (each run's own objective)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save_figure(fig, path)


def plot_recalls(retrieval: dict, path: str | Path, title: str = "") -> Path:
    """Save a bar chart of Recall@K, image-to-text beside text-to-image."""
    plt = _pyplot()
    ks = sorted(int(key.removeprefix("i2t_r")) for key in retrieval if key.startswith("i2t_r"))
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    for offset, direction, label in ((-width / 2, "i2t", "image to text"), (width / 2, "t2i", "text to image")):
        values = [retrieval[f"{direction}_r{k}"] for k in ks]
        bars = ax.bar([i + offset for i in range(len(ks))], values, width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(ks)), [f"R@{k}" for k in ks])
    ax.set_ylim(0, 105)
    ax.set_ylabel("recall (%)")
    ax.set_title(title or f"Retrieval (RSUM {retrieval['rsum']:.1f})")
    ax.legend()
    return _save_figure(fig, path)


__all__ = ["plot_loss_curves", "plot_prefix_similarity", "plot_recalls"]
