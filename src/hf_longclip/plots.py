"""Figures of evaluation and training results (matplotlib, Agg backend, PNG files); the metrics they show are
computed in `hf_longclip.evaluation` and `hf_longclip.metrics`.

    plot_prefix_similarity({"himo-clip": curve}, "prefix.png", coverage(512, 3584, "caption prefixes"))
    plot_loss_curves({"himo-clip": trainer_log_history}, "loss.png")
    plot_recalls(report["retrieval"], "recall.png")
"""

from __future__ import annotations

import math
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


def coverage(num_images: int, num_texts: int, texts: str = "texts") -> str:
    """What a results plot covers, e.g. "512 images, 3,584 caption prefixes"."""
    return f"{num_images:,} images, {num_texts:,} {texts}"


def plot_prefix_similarity(curves: dict[str, Sequence[float]], path: str | Path, covers: str, title: str = "") -> Path:
    """Save a PNG of mean image-text similarity against the number of caption sentences, one line per model
    (HiMo-CLIP Fig. 3); `covers` (see `coverage`) says how many images and texts it averages."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, marker="o", label=name)
    ax.set_xlabel("caption prefix length (sentences)")
    ax.set_ylabel("mean cosine similarity with the image")
    ax.set_title(f"{title or 'Semantic monotonicity: similarity vs. caption completeness'}\n{covers}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save_figure(fig, path)


def plot_loss_curves(histories: dict[str, Sequence[dict]], path: str | Path, title: str = "Training loss") -> Path:
    """Save a PNG of the training loss against the optimizer step, one line per run: the loss in the first panel
    and, when a run's objective has several terms, one panel per term (terms differ in scale). Each point is the
    mean over its logging window, as the loop records it."""
    plt = _pyplot()
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
    return _save_figure(fig, path)


def plot_seed_summary(summary: dict[str, dict[str, dict]], metrics: Sequence[str], path: str | Path,
                      title: str = "") -> Path:
    """Save a PNG with one panel per metric: per variant, the mean over seeds (diamond), its +- std whisker and a dot
    per seed (`hf_longclip.training.recipe.summarize_seeds`), so a difference can be read against the spread."""
    plt = _pyplot()
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
    return _save_figure(fig, path)


def plot_attention_maps(rows: Sequence[tuple], path: str | Path, title: str = "") -> Path:
    """Save a PNG like F-CAST's Fig. 7: one row per image, the image then one attention map per sub-caption over it,
    with the named object's box. `rows`: (image array (H, W, 3), [(sub-caption, map (H, W), box (x0, y0, x1, y1) as
    fractions of the side or None), ...])."""
    import textwrap

    plt = _pyplot()
    columns = 1 + max(len(maps) for _, maps in rows)
    fig, axes = plt.subplots(len(rows), columns, figsize=(2.5 * columns, 3.0 * len(rows)), squeeze=False)
    for ax_row, (image, maps) in zip(axes, rows):
        ax_row[0].imshow(image)
        ax_row[0].set_title("image", fontsize=8)
        for ax, (caption, heat, box) in zip(ax_row[1:], maps):
            ax.imshow(image)
            ax.imshow(heat, cmap="jet", alpha=0.55)
            if box is not None:
                height, width = heat.shape
                ax.add_patch(plt.Rectangle((box[0] * width, box[1] * height), (box[2] - box[0]) * width,
                                           (box[3] - box[1]) * height, fill=False, edgecolor="white", linewidth=1.5))
            ax.set_title(textwrap.fill(caption, 38), fontsize=6.5)
        for ax in ax_row:
            ax.axis("off")
    fig.suptitle(title, fontsize=9)
    return _save_figure(fig, path)


def plot_recalls(retrieval: dict, path: str | Path, title: str = "") -> Path:
    """Save a bar chart of Recall@K, image-to-text beside text-to-image, with how many images and texts it ranks."""
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
    covers = coverage(retrieval["num_images"], retrieval["num_texts"])
    ax.set_title(f"{title or 'Retrieval'} (RSUM {retrieval['rsum']:.1f})\n{covers}", fontsize=10)
    ax.legend()
    return _save_figure(fig, path)


__all__ = ["coverage", "plot_loss_curves", "plot_prefix_similarity", "plot_recalls"]


def plot_levels(descriptiveness: Sequence[Sequence[float]], distances: dict[str, Sequence[float]], path: str | Path,
                covers: str) -> Path:
    """Save DITM's Fig. 8(b)-(c) as one PNG: (b) the descriptiveness of the texts at each hierarchy level (mean and
    standard deviation; `descriptiveness[l]` holds the level-l scores), (c) the mean Euclidean distance between an
    image and its level-l text, one line per model. DITM's intended order: distances fall as descriptiveness rises."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    levels = range(1, len(descriptiveness) + 1)
    means = [sum(scores) / len(scores) for scores in descriptiveness]
    spreads = [(sum((s - m) ** 2 for s in scores) / len(scores)) ** 0.5 for scores, m in zip(descriptiveness, means)]
    left.errorbar(levels, means, yerr=spreads, marker="o", capsize=4)
    left.set_xlabel("hierarchy level (1: generic ... specific)")
    left.set_ylabel("descriptiveness delta (test pool)")
    left.set_title("(b) descriptiveness per level", fontsize=10)
    for name, curve in distances.items():
        right.plot(range(1, len(curve) + 1), curve, marker="o", label=name)
    right.set_xlabel("hierarchy level (1: generic ... specific)")
    right.set_ylabel("mean distance |v - t| (L2-normalised)")
    right.set_title("(c) image-text distance per level", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(list(levels))
        ax.grid(alpha=0.3)
    fig.suptitle(covers, fontsize=10)
    return _save_figure(fig, path)


def plot_recall_by_length(panels: dict[str, dict[str, dict[int, float]]], path: str | Path, covers: str,
                          title: str = "", reference: dict[str, float] | None = None) -> Path:
    """Save a PNG of R@1 against the maximum training length (OneLIP Fig. 3): one panel per metric
    (`{panel title: {method: {max length: value}}}`), one line per method; `reference` (`{panel title: value}`)
    draws a dashed line, e.g. the base model's score."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (panel, lines) in zip(axes[0], panels.items()):
        for name, points in lines.items():
            lengths = sorted(points)
            ax.plot(lengths, [points[length] for length in lengths], marker="o", label=name)
        if reference and panel in reference:
            ax.axhline(reference[panel], color="gray", linestyle="--", label="base CLIP-77")
        lengths = sorted({length for points in lines.values() for length in points})
        ax.set_xticks(lengths)
        ax.set_xlabel("maximum training length (tokens)")
        ax.set_ylabel("R@1 (%)")
        ax.set_title(panel, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title or 'R@1 vs. maximum training length'}\n{covers}", fontsize=10)
    return _save_figure(fig, path)


def plot_segment_hierarchy(image, superpixels, assignments: Sequence, path: str | Path, title: str = "") -> Path:
    """Save a PNG of CAST's fine-to-coarse segmentation of one image (F-CAST Fig. 6): the image, its superpixels,
    then one panel per graph pooling, each segment filled with its mean colour and outlined in white.

    `image` is (H, W, 3) uint8 (or a PIL image) as the model saw it (e.g. `CASTImageProcessor.crop`),
    `superpixels` its (H, W) ids and `assignments` its (N_l, N_l+1) matrices (`CASTVisionOutput.assignments[l][i]`
    for image i), taken hard and composed by `models.cast.segments.hierarchy_label_maps`."""
    import numpy as np
    import torch

    from .models.cast.segments import hierarchy_label_maps

    pixels = np.asarray(image, dtype=np.float64)[..., :3]
    superpixels = torch.as_tensor(np.asarray(superpixels))
    if superpixels.shape != pixels.shape[:2]:
        raise ValueError(f"superpixels of shape {tuple(superpixels.shape)} do not match the image's "
                         f"{pixels.shape[:2]}")
    maps = hierarchy_label_maps(superpixels[None], [torch.as_tensor(a).detach().float()[None] for a in assignments])
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(maps) + 1, figsize=(2.6 * (len(maps) + 1), 2.9))
    axes[0].imshow(pixels.astype(np.uint8))
    axes[0].set_title("image", fontsize=9)
    for level, (ax, labels) in enumerate(zip(axes[1:], maps)):
        labels = labels[0].cpu().numpy()
        flat = labels.ravel()
        counts = np.bincount(flat).clip(min=1)[:, None]
        means = np.stack([np.bincount(flat, weights=pixels[..., c].ravel()) for c in range(3)], axis=1) / counts
        filled = means[labels]
        edges = np.zeros(labels.shape, dtype=bool)
        edges[1:] |= labels[1:] != labels[:-1]
        edges[:, 1:] |= labels[:, 1:] != labels[:, :-1]
        filled[edges] = 255
        ax.imshow(filled.astype(np.uint8))
        kind = "superpixels" if level == 0 else f"after pooling {level}"
        ax.set_title(f"{len(np.unique(flat))} segments ({kind})", fontsize=9)
    for ax in axes:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save_figure(fig, path)
