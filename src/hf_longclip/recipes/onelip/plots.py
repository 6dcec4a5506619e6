"""OneLIP's figure: R@1 against the maximum training length (Fig. 3, of train_onelip.py's rows); and what its loss
curves need explained.

Imported explicitly: neither `hf_longclip.models.onelip` nor the model's remote code imports it, so that matplotlib
(`hf-longclip[plots]`) stays optional."""

from __future__ import annotations

import inspect
from pathlib import Path

from hf_longclip.objectives.onelip import OneLIPLoss
from hf_longclip.plots import pyplot, save_figure
from hf_longclip.recipes.onelip.method import BASE, BASE_LENGTH, ONE_STAGE, VARIANTS

FIG3_LINES = {"clip": "fine-tuned CLIP (Long-CLIP stretching)", "trim": "OneLIP"}  # objective: line


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


def plot_figure_3(results: dict[str, dict], path: Path) -> None:
    """Fig. 3 of train_onelip.py's `results` ({row: `evaluate_text_lengths` results}, the start's first): R@1 on the
    long captions and on the pairs differing after token 77 against the one-stage rows' maximum training length, one
    line per objective of `FIG3_LINES`, the base CLIP-77 dashed."""
    panels = {}
    for panel, keys in (("long captions: mean R@1 (I2T, T2I)", ("r1_i2t", "r1_t2i")),
                        ("pairs differing after token 77: mean R@1", ("hard_r1_i2t", "hard_r1_t2i"))):
        lines = {}
        for variant in ONE_STAGE:
            objective, length = VARIANTS[variant]["objective"], VARIANTS[variant]["length"]
            if objective in FIG3_LINES and variant in results:
                lines.setdefault(FIG3_LINES[objective], {})[length] = sum(results[variant][k] for k in keys) / 2
        panels[panel] = lines
    reference = None
    if BASE in results:
        reference = {panel: sum(results[BASE][k] for k in keys) / 2 for panel, keys in
                     zip(panels, (("r1_i2t", "r1_t2i"), ("hard_r1_i2t", "hard_r1_t2i")))}
    first = next(iter(results.values()))
    plot_recall_by_length(panels, path, f"{first['num_images']:,} test images; {first['num_hard_pairs']} hard pairs "
                                        f"differ only after token {BASE_LENGTH}", reference=reference)
