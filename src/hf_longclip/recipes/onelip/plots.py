"""OneLIP's figure: R@1 against the maximum training length (Fig. 3); and what its loss curves need explained.

Imported explicitly: neither `hf_longclip.models.onelip` nor the model's remote code imports it, so that matplotlib
(`hf-longclip[plots]`) stays optional."""

from __future__ import annotations

import inspect
from pathlib import Path

from hf_longclip.objectives.onelip import OneLIPLoss
from hf_longclip.plots import pyplot, save_figure


def loss_notes(switch_fraction: float) -> dict[str, str]:
    """`plot_loss_curves` notes: each term is logged with its Eq. 10 weight, which changes at the weight switch
    (Sec. 4.1), so the logged distillation terms jump there while the losses themselves do not."""
    parameters = inspect.signature(OneLIPLoss).parameters  # the weights every script's OneLIPTask uses
    before, after = parameters["weights"].default, parameters["weights_after"].default
    when = f"at the weight switch ({switch_fraction:.0%} of each run's steps): the jump is the weight's"
    return {"coarse_loss": f"logged × its Eq. 10 weight, {before[0]} → {after[0]} {when}",
            "token_loss": f"logged × its Eq. 10 weight, {before[1]} → {after[1]} {when}"}


def plot_recall_by_length(panels: dict[str, dict[str, dict[int, float]]], path: str | Path, covers: str,
                          title: str = "", reference: dict[str, float] | None = None) -> Path:
    """Save a PNG of R@1 against the maximum training length (OneLIP Fig. 3): one panel per metric
    (`{panel title: {method: {max length: value}}}`), one line per method; `reference` (`{panel title: value}`)
    draws a dashed line, e.g. the base model's score."""
    plt = pyplot()
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
    return save_figure(fig, path)
