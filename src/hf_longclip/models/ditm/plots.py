"""DITM's figure: the descriptiveness of the texts at each hierarchy level and the image-text distance per level
(Fig. 8(b)-(c)).

Imported explicitly: neither `hf_longclip.models.ditm` nor the model's remote code imports it, so that matplotlib
(`hf-longclip[plots]`) stays optional."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...plots import pyplot, save_figure


def plot_levels(descriptiveness: Sequence[Sequence[float]], distances: dict[str, Sequence[float]], path: str | Path,
                covers: str) -> Path:
    """Save DITM's Fig. 8(b)-(c) as one PNG: (b) the descriptiveness of the texts at each hierarchy level (mean and
    standard deviation; `descriptiveness[l]` holds the level-l scores), (c) the mean Euclidean distance between an
    image and its level-l text, one line per model. DITM's intended order: distances fall as descriptiveness rises."""
    plt = pyplot()
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
    return save_figure(fig, path)
