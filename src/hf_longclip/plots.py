"""Figures of evaluation and training results (matplotlib, Agg backend, PNG files); the metrics they show are
computed in `hf_longclip.evaluation` and `hf_longclip.metrics`.

    plot_prefix_similarity({"himo-clip": curve}, "prefix.png", coverage(512, 3584, "caption prefixes"))
    plot_loss_curves({"himo-clip": trainer_log_history}, "loss.png")
    plot_recalls(report["retrieval"], "recall.png")

Each model's own figures are in `hf_longclip.models.<arch>.plots`, drawn with `pyplot` and `save_figure`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (matplotlib is optional)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out `fig`, write it to `path` as a PNG and close it; returns the path."""
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path


def coverage(num_images: int, num_texts: int, texts: str = "texts") -> str:
    """What a results plot covers, e.g. "512 images, 3,584 caption prefixes"."""
    return f"{num_images:,} images, {num_texts:,} {texts}"


def plot_prefix_similarity(curves: dict[str, Sequence[float]], path: str | Path, covers: str, title: str = "") -> Path:
    """Save a PNG of mean image-text similarity against the number of caption sentences, one line per model
    (HiMo-CLIP Fig. 3); `covers` (see `coverage`) says how many images and texts it averages."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, marker="o", label=name)
    ax.set_xlabel("caption prefix length (sentences)")
    ax.set_ylabel("mean cosine similarity with the image")
    ax.set_title(f"{title or 'Semantic monotonicity: similarity vs. caption completeness'}\n{covers}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_loss_curves(histories: dict[str, Sequence[dict]], path: str | Path, title: str = "Training loss") -> Path:
    """Save a PNG of the training loss against the optimizer step, one line per run: the loss in the first panel
    and, when a run's objective has several terms, one panel per term (terms differ in scale). Each point is the
    mean over its logging window, as the loop records it."""
    plt = pyplot()
    terms = list(dict.fromkeys(key for history in histories.values() for record in history for key in record
                               if key.endswith("_loss") and key != "eval_loss"))
    panels = ["loss", *terms]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, key in zip(axes[0], panels):
        for name, history in histories.items():
            logged = [record for record in history if key in record]
            if logged:
                ax.plot([record["step"] for record in logged], [record[key] for record in logged], label=name)
        ax.set_xlabel("optimizer step")
        ax.set_title("loss (each run's own objective)" if key == "loss" else key, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title} (mean over each logging window)")
    return save_figure(fig, path)


def plot_seed_summary(summary: dict[str, dict[str, dict]], metrics: Sequence[str], path: str | Path,
                      title: str = "") -> Path:
    """Save a PNG with one panel per metric: per variant, the mean over seeds (diamond), its +- std whisker and a dot
    per seed (`hf_longclip.training.results.summarize_seeds`), so a difference can be read against the spread."""
    plt = pyplot()
    variants = list(summary)
    columns = min(len(metrics), 4)
    rows = -(-len(metrics) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 0.45 * len(variants) * rows + 1.6 * rows),
                             squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        cells = [summary[variant][metric] for variant in variants]
        positions = range(len(variants))
        ax.errorbar([cell["mean"] for cell in cells], list(positions), xerr=[cell["std"] for cell in cells], fmt="D",
                    color="#08306b", markersize=6, capsize=4, linewidth=1.5)
        for position, cell in zip(positions, cells):
            ax.plot(cell["values"], [position] * cell["n"], "o", color="#d94801", markersize=3.5, alpha=0.8, zorder=3)
        ends = [end for cell in cells if math.isfinite(cell["std"]) for value in cell["values"]
                if math.isfinite(value) for end in (value - cell["std"], value + cell["std"])]
        if ends:  # zoomed on the finite values (a metric undefined for a run, e.g. too few rows, is NaN)
            low, high = min(ends), max(ends)
            margin = 0.15 * (high - low) or 0.1 * abs(high) or 0.1
            ax.set_xlim(low - margin, high + margin)
        ax.set_ylim(len(variants) - 0.5, -0.5)
        ax.set_yticks(list(positions), variants if ax in axes[:, 0] else [""] * len(variants), fontsize=8)
        ax.set_title(metric if len(ends) == 2 * sum(cell["n"] for cell in cells) else f"{metric} (NaN left out)",
                     fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    n = next(iter(summary.values()))[metrics[0]]["n"]
    fig.suptitle(f"{title}\ndiamond: mean over {n} seed(s), whisker: ± std, dots: each seed", fontsize=10)
    return save_figure(fig, path)


def plot_recalls(retrieval: dict, path: str | Path, title: str = "") -> Path:
    """Save a bar chart of Recall@K, image-to-text beside text-to-image, with how many images and texts it ranks."""
    plt = pyplot()
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
    covers = coverage(retrieval["num_images"], retrieval["num_texts"])
    ax.set_title(f"{title or 'Retrieval'} (RSUM {retrieval['rsum']:.1f})\n{covers}", fontsize=10)
    ax.legend()
    return save_figure(fig, path)


__all__ = ["coverage", "plot_loss_curves", "plot_prefix_similarity", "plot_recalls", "plot_seed_summary", "pyplot",
           "save_figure"]
