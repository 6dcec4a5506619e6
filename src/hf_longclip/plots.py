"""Figures of evaluation and training results (matplotlib, Agg backend, PNG files); the metrics they show are
computed in `hf_longclip.evaluation` and `hf_longclip.metrics`.

    plot_prefix_similarity({"himo-clip": curve}, "prefix.png", coverage(512, 3584, "caption prefixes"))
    plot_loss_curves({"himo-clip": trainer_log_history}, "loss.png")
    plot_recalls(report["retrieval"], "recall.png")

A method's own figures, where it has any, are in `hf_longclip.recipes.<arch>.plots`, drawn with `pyplot` and
`save_figure`.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from .modeling_common.optional import require


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (matplotlib is the extra `hf-longclip[plots]`;
    a missing one is an ImportError naming it)."""
    require("matplotlib", "plots", "matplotlib", "hf_longclip's figures").use("Agg")
    return require("matplotlib.pyplot", "plots", "matplotlib", "hf_longclip's figures")


def save_figure(fig, path: str | Path, layout: bool = True) -> Path:
    """Lay out `fig` (unless `layout=False`: the caller did), write it to `path` as a PNG (its folder created) and
    close it; returns the path."""
    if layout:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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


def run_styles(names: Sequence[str]) -> dict[str, dict]:
    """A distinct line style per run, the same in every panel of a figure: tab10's ten colours, solid, then the same
    colours dashed, dotted, dash-dotted for runs 11 to 40 (`ax.plot(..., **styles[name])`)."""
    colours = pyplot().get_cmap("tab10").colors
    return {name: {"color": colours[index % 10], "linestyle": ("-", "--", ":", "-.")[index // 10 % 4]}
            for index, name in enumerate(names)}


def plot_loss_curves(histories: dict[str, Sequence[dict]], path: str | Path, title: str = "Training loss",
                     notes: Mapping[str, str] | None = None) -> Path:
    """Save a PNG of the training loss against the optimizer step, one line per run in one colour throughout: the
    loss in the first panel and, when a run's objective has several terms, one panel per term (terms differ in scale),
    at most three panels a row. Each point is the mean over its logging window, as the loop records it. `notes`
    ({panel key: text}) explains a panel under its title, e.g. a weight that changes during training."""
    plt = pyplot()
    notes = notes or {}
    terms = list(dict.fromkeys(key for history in histories.values() for record in history for key in record
                               if key.endswith("_loss") and key != "eval_loss"))
    panels = ["loss", *terms]
    rows = -(-len(panels) // 3)
    columns = -(-len(panels) // rows)  # at most three a row, rows filled evenly (4 panels: 2 x 2)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.6 * rows + 0.25 * len(histories) / columns),
                             squeeze=False)
    styles = run_styles(list(histories))
    for ax, key in zip(axes.flat, panels):
        for name, history in histories.items():
            logged = [record for record in history if key in record]
            if logged:
                ax.plot([record["step"] for record in logged], [record[key] for record in logged], label=name,
                        **styles[name])
        ax.set_xlabel("optimizer step")
        heading = "loss (each run's own objective)" if key == "loss" else key
        note = textwrap.fill(notes[key], 56) if key in notes else ""
        ax.set_title(f"{heading}\n{note}".strip(), fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{title} (mean over each logging window)")
    fig.tight_layout()
    handles, labels = axes[0, 0].get_legend_handles_labels()  # the first panel has every run
    legend_rows = -(-len(labels) // 6)
    fig.subplots_adjust(bottom=fig.subplotpars.bottom + 0.05 * legend_rows / rows)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    return save_figure(fig, path, layout=False)


def plot_seed_summary(summary: dict[str, dict[str, dict]], metrics: Sequence[str], path: str | Path,
                      title: str = "") -> Path:
    """Save a PNG with one panel per metric: per variant, the mean over seeds (diamond), its +- std whisker and a dot
    per seed (`hf_longclip.training.results.summarize_seeds`), so a difference can be read against the spread."""
    plt = pyplot()
    variants = list(summary)
    columns = min(len(metrics), 4)
    rows = -(-len(metrics) // columns)
    fig, axes = plt.subplots(rows, columns, squeeze=False,
                             figsize=(max(3.4 * columns, 6.0), 0.45 * len(variants) * rows + 1.6 * rows + 0.4))
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
    fig.suptitle(f"{title}\ndiamond: mean over {n} seeds, whisker: ± std, dots: each seed", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))  # the two title lines keep their 0.6 inch
    return save_figure(fig, path, layout=False)


def plot_recalls(retrieval: dict, path: str | Path, title: str = "") -> Path:
    """Save a bar chart of Recall@K, image-to-text beside text-to-image, with how many images and texts it ranks."""
    plt = pyplot()
    ks = sorted(int(key[1:].removesuffix("_i2t")) for key in retrieval if re.fullmatch(r"r\d+_i2t", key))
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    for offset, direction, label in ((-width / 2, "i2t", "image to text"), (width / 2, "t2i", "text to image")):
        values = [retrieval[f"r{k}_{direction}"] for k in ks]
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
           "run_styles", "save_figure"]
