"""F-CAST's grounding figure: each sub-caption's attention map over its image, with the named object's box (Fig. 7).

Imported explicitly: neither `hf_longclip.models.fcast` nor the model's remote code imports it, so that matplotlib
(`hf-longclip[plots]`) stays optional."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import torch

from hf_longclip.plots import pyplot, save_figure
from hf_longclip.recipes.fcast.evaluation import sentence_attention


def plot_attention_maps(rows: Sequence[tuple], path: str | Path, title: str = "") -> Path:
    """Save a PNG like F-CAST's Fig. 7: one row per image, the image then one attention map per sub-caption over it,
    with the named object's box. `rows`: (image array (H, W, 3), [(sub-caption, map (H, W), box (x0, y0, x1, y1) as
    fractions of the side or None), ...]); each map sums to 1 over its pixels. Maps are drawn as density against a
    uniform map (1: uniform) on one colour scale, read on the colour bar."""
    plt = pyplot()
    columns = 1 + max(len(maps) for _, maps in rows)
    densities = [[heat * heat.size for _, heat, _ in maps] for _, maps in rows]
    top = max(float(density.max()) for row in densities for density in row)
    fig, axes = plt.subplots(len(rows), columns, figsize=(2.5 * columns + 0.6, 3.0 * len(rows)), squeeze=False)
    for ax_row, (image, maps), row_densities in zip(axes, rows, densities):
        ax_row[0].imshow(image)
        ax_row[0].set_title("image", fontsize=8)
        for ax, (caption, heat, box), density in zip(ax_row[1:], maps, row_densities):
            ax.imshow(image)
            shown = ax.imshow(density, cmap="jet", alpha=0.55, vmin=0, vmax=top)
            if box is not None:
                height, width = heat.shape
                ax.add_patch(plt.Rectangle((box[0] * width, box[1] * height), (box[2] - box[0]) * width,
                                           (box[3] - box[1]) * height, fill=False, edgecolor="white", linewidth=1.5))
            ax.set_title(textwrap.fill(caption, 38), fontsize=6.5)
        for ax in ax_row:
            ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    colour_bar = fig.colorbar(shown, cax=fig.add_axes((0.94, 0.2, 0.015, 0.6)))
    colour_bar.set_label("attention density (1: uniform)", fontsize=8)
    return save_figure(fig, path, layout=False)


@torch.no_grad()
def plot_grounding(model, processor, rows, path: str | Path, name: str) -> Path:
    """Fig. 7's layout for the synthetic scenes `rows`: each image, then the attention maps of three of its object
    sentences (`sentence_attention`) with their boxes."""
    figure_rows = []
    for row in rows:
        subs = row["sentences"][1:4]
        _, maps = sentence_attention(model, processor, row["image"], subs)
        figure_rows.append((processor.image_processor.crop(row["image"]), [
            (sub, heat.numpy(), box) for sub, heat, box in zip(subs, maps, row["boxes"])]))
    return plot_attention_maps(figure_rows, path,
                               f"{name}: AttnPool attention per sub-caption (white: the named object's box)")
