"""DITM's figure: the descriptiveness of the texts at each hierarchy level and the image-text distance per level
(the paper's Fig. 8(b) and 8(c); its 8(a), example images, has no counterpart here).

Imported explicitly: neither `hf_longclip.models.ditm` nor the model's remote code imports it, so that matplotlib
(`hf-longclip[plots]`) stays optional."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hf_longclip.plots import pyplot, run_styles, save_figure

# `plot_loss_curves` note: why the logged ordering loss may rise while the run improves
LOSS_NOTES = {"order_loss": "λ × Eq. 6, summed over caption pairs: it can rise while the far larger triplet "
                            "term drives the total (first panel) down"}


def plot_levels(descriptiveness: Sequence[Sequence[float]], distances: dict[str, Sequence[float]], path: str | Path,
                covers: str) -> Path:
    """Save DITM's Fig. 8(b) and 8(c) as one PNG: the descriptiveness of the texts at each hierarchy level (mean and
    standard deviation; `descriptiveness[l]` holds the level-l scores), and the mean Euclidean distance between an
    image and its level-l text, one line per model, each with its own marker and dash so that coinciding curves stay
    visible (the legend names the model a curve is within 1% of the axis from). DITM's intended order: distances fall as
    descriptiveness rises."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    levels = range(1, len(descriptiveness) + 1)
    means = [sum(scores) / len(scores) for scores in descriptiveness]
    spreads = [(sum((s - m) ** 2 for s in scores) / len(scores)) ** 0.5 for scores, m in zip(descriptiveness, means)]
    left.errorbar(levels, means, yerr=spreads, marker="o", capsize=4)
    left.set_xlabel("hierarchy level (1: generic ... specific)")
    left.set_ylabel("descriptiveness delta (test pool)")
    left.set_title("descriptiveness per level (DITM Fig. 8b)", fontsize=10)
    styles = run_styles(list(distances))
    markers = "osD^v<>p*h"
    values = [value for curve in distances.values() for value in curve]
    tolerance = 0.01 * (max(values) - min(values))  # closer than 1% of the axis: indistinguishable on the plot
    for index, (name, curve) in enumerate(distances.items()):
        same = [other for other in list(distances)[:index]
                if all(abs(a - b) <= tolerance for a, b in zip(curve, distances[other]))]
        label = f"{name} (≈ {same[0]})" if same else name
        right.plot(range(1, len(curve) + 1), curve, marker=markers[index % len(markers)], markersize=8 - 1.2 * index,
                   label=label, **{**styles[name], "linestyle": ("-", "--", ":", "-.")[index % 4]})
    right.set_xlabel("hierarchy level (1: generic ... specific)")
    right.set_ylabel("mean distance |v - t| (L2-normalised)")
    right.set_title("image-text distance per level (DITM Fig. 8c)", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(list(levels))
        ax.grid(alpha=0.3)
    fig.suptitle(covers, fontsize=10)
    return save_figure(fig, path)
