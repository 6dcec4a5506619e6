"""CAST's figure: the fine-to-coarse segmentation of an image, one panel per level (F-CAST Fig. 6).

Imported explicitly: neither `hf_longclip.models.cast` nor the model's remote code imports it, so that matplotlib
(`hf-longclip[plots]`) stays optional."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from hf_longclip.models.cast.segments import hierarchy_label_maps
from hf_longclip.plots import pyplot, save_figure


def plot_segment_hierarchy(image, superpixels, assignments: Sequence, path: str | Path, title: str = "") -> Path:
    """Save a PNG of CAST's fine-to-coarse segmentation of one image (F-CAST Fig. 6): the image, its superpixels,
    then one panel per graph pooling, each segment filled with its mean colour and outlined in white.

    `image` is (H, W, 3) uint8 (or a PIL image) as the model saw it (e.g. `CASTImageProcessor.crop`),
    `superpixels` its (H, W) ids and `assignments` its (N_l, N_l+1) matrices (`CASTVisionOutput.assignments[l][i]`
    for image i), taken hard and composed by `models.cast.segments.hierarchy_label_maps`."""
    return plot_segment_hierarchies([(image, superpixels, assignments)], path, title)


def plot_segment_hierarchies(rows: Sequence[tuple], path: str | Path, title: str = "") -> Path:
    """`plot_segment_hierarchy` of several images in one PNG, one row each: `rows` holds (image, superpixels,
    assignments) triples."""
    levels = []
    for image, superpixels, assignments in rows:
        pixels = np.asarray(image, dtype=np.float64)[..., :3]
        superpixels = torch.as_tensor(np.asarray(superpixels))
        if superpixels.shape != pixels.shape[:2]:
            raise ValueError(f"superpixels of shape {tuple(superpixels.shape)} do not match the image's "
                             f"{pixels.shape[:2]}")
        maps = hierarchy_label_maps(superpixels[None],
                                    [torch.as_tensor(a).detach().float()[None] for a in assignments])
        levels.append((pixels, [labels[0].cpu().numpy() for labels in maps]))
    plt = pyplot()
    columns = 1 + max(len(maps) for _, maps in levels)
    fig, axes = plt.subplots(len(levels), columns, figsize=(2.6 * columns, 2.9 * len(levels)), squeeze=False)
    for ax_row, (pixels, maps) in zip(axes, levels):
        ax_row[0].imshow(pixels.astype(np.uint8))
        ax_row[0].set_title("image", fontsize=9)
        for level, (ax, labels) in enumerate(zip(ax_row[1:], maps)):
            ax.imshow(_segments_in_mean_colour(pixels, labels))
            kind = "superpixels" if level == 0 else f"after pooling {level}"
            ax.set_title(f"{len(np.unique(labels))} segments ({kind})", fontsize=9)
    for ax in axes.flat:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


@torch.no_grad()
def plot_hierarchy(model, processor, rows, path: Path, count: int = 2) -> None:
    """CAST's (`CASTForImageClassification`'s) segmentation of the first `count` images of `rows` at every level
    (superpixels, then each graph pooling), one row per image in one PNG."""
    model.eval()
    device = next(model.parameters()).device
    figure_rows = []
    for index in range(count):
        image = rows[index]["image"]
        inputs = processor([image])
        out = model.cast(inputs["pixel_values"].to(device), inputs["superpixels"].to(device))
        figure_rows.append((processor.crop(image), inputs["superpixels"][0], [a[0].cpu() for a in out.assignments]))
    plot_segment_hierarchies(figure_rows, path, title=f"CAST fine-to-coarse segments of {count} test images")


def _segments_in_mean_colour(pixels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8: each segment of `labels` filled with its mean colour in `pixels`, outlined in white."""
    flat = labels.ravel()
    counts = np.bincount(flat).clip(min=1)[:, None]
    means = np.stack([np.bincount(flat, weights=pixels[..., c].ravel()) for c in range(3)], axis=1) / counts
    filled = means[labels]
    edges = np.zeros(labels.shape, dtype=bool)
    edges[1:] |= labels[1:] != labels[:-1]
    edges[:, 1:] |= labels[:, 1:] != labels[:, :-1]
    filled[edges] = 255
    return filled.astype(np.uint8)
