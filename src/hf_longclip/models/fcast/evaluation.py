"""F-CAST's grounding evaluation (Fig. 7) on rows whose object sentences each name one boxed object (the
synthetic scenes): the pointing game and the attention mass inside the box, from `FCASTModel.get_grounding`.

    grounding_scores(model, processor, test)   # {"pointing_game", "box_mass", "uniform_box_mass", "num_sentences"}

Retrieval with long captions and late-differing pairs is the protocol train_fcast.py shares with train_onelip.py.
Library-side only: the remote code of the model (configuration_, modeling_, processing_fcast.py) never imports it.
"""

from __future__ import annotations

import numpy as np
import torch

from .modeling_fcast import FCASTModel
from .processing_fcast import FCASTProcessor


@torch.no_grad()
def grounding_scores(model: FCASTModel, processor: FCASTProcessor, rows) -> dict:
    """Pointing game and attention mass in the box over every object sentence of `rows` (sentence m + 1 names the
    object of box m), with the boxes' mean share of the image (a uniform map's mass) for reference. The attention is
    `get_grounding`'s pixel density (per superpixel or patch, spread over its area), so its peak is a region: a hit
    counts the share of the peak's pixels inside the box (argmax alone would pick the region's first pixel)."""
    model.eval()
    hits, masses, shares = [], [], []
    for row in rows:
        objects = row["sentences"][1:]
        inputs = processor(text=[objects], images=[row["image"]], padding="longest").to(model.device)
        out = model.get_grounding(inputs["pixel_values"], inputs["superpixels"], inputs["input_ids"],
                                  inputs["attention_mask"])
        density = out.pixel_attention[0].cpu()
        size = density.shape[-1]
        for m, box in enumerate(row["boxes"]):
            x0, y0, x1, y1 = (min(size, max(0, round(v * size))) for v in box)
            inside = torch.zeros(size, size, dtype=torch.bool)
            inside[y0:y1, x0:x1] = True
            peak = torch.isclose(density[m], density[m].max())  # the whole superpixel or patch at the maximum
            hits.append(float(peak[inside].sum() / peak.sum()))
            masses.append(float(density[m][inside].sum()))
            shares.append(float(inside.float().mean()))
    return {"pointing_game": 100 * float(np.mean(hits)), "box_mass": 100 * float(np.mean(masses)),
            "uniform_box_mass": 100 * float(np.mean(shares)), "num_sentences": len(hits)}
