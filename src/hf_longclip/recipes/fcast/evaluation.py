"""F-CAST's grounding evaluation (Fig. 7) on rows whose object sentences each name one boxed object (the
synthetic scenes): the pointing game and the attention mass inside the box, from `FCASTModel.get_grounding`.

    sentence_attention(model, processor, image, sentences)  # (pixel values, one attention map per sentence)
    grounding_scores(model, processor, test)   # {"pointing_game", "box_mass", "uniform_box_mass", "map_difference",
                                               #  "box_map_difference", "num_sentences"}
    evaluate_scenes(model, processor, test, pairs, batch_size, grounding_images)  # retrieval, then grounding

Retrieval with long captions and late-differing pairs is the protocol train_fcast.py shares with train_onelip.py
(`hf_longclip.evaluation.long_captions`).
Library-side only: the remote code of the model (configuration_, modeling_, processing_fcast.py) never imports it.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import torch

from hf_longclip.evaluation.long_captions import evaluate_text_lengths
from hf_longclip.models.fcast.modeling_fcast import FCASTModel
from hf_longclip.models.fcast.processing_fcast import FCASTProcessor


@torch.no_grad()
def sentence_attention(model: FCASTModel, processor: FCASTProcessor, image, sentences: list[str]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the image's pixel values (3, H, W) as the model sees them, the (len(sentences), H, W) attention of each
    sentence over its pixels), from `get_grounding` (Eq. 6; a ViT's model needs no superpixels)."""
    inputs = processor(text=[sentences], images=[image], padding="longest").to(model.device)
    out = model.get_grounding(inputs["pixel_values"], inputs.get("superpixels"), inputs["input_ids"],
                              inputs["attention_mask"])
    return inputs["pixel_values"][0].cpu().float(), out.pixel_attention[0].cpu().float()


@torch.no_grad()
def grounding_scores(model: FCASTModel, processor: FCASTProcessor, rows) -> dict:
    """Pointing game and attention mass in the box over every object sentence of `rows` (sentence m + 1 names the
    object of box m), with the boxes' mean share of the image (a uniform map's mass) for reference. The attention is
    `get_grounding`'s pixel density (per superpixel or patch, spread over its area), so its peak is a region: a hit
    counts the share of the peak's pixels inside the box (argmax alone would pick the region's first pixel).

    Text-conditioning: `map_difference` is the mean total variation distance 1/2 sum |p_m - p_m'| (in %) between
    the maps of two object sentences of one image, over every such pair: 0 when the pooling attends the same way
    whatever the sentence names, 100 for maps on disjoint pixels. `box_map_difference` is the same for maps uniform
    over each named box (what maps that each cover their box exactly would score)."""
    model.eval()
    hits, masses, shares, differences, box_differences = [], [], [], [], []
    for row in rows:
        _, density = sentence_attention(model, processor, row["image"], row["sentences"][1:])
        size = density.shape[-1]
        boxes = []
        for m, box in enumerate(row["boxes"]):
            x0, y0, x1, y1 = (min(size, max(0, round(v * size))) for v in box)
            inside = torch.zeros(size, size, dtype=torch.bool)
            inside[y0:y1, x0:x1] = True
            peak = torch.isclose(density[m], density[m].max())  # the whole superpixel or patch at the maximum
            hits.append(float(peak[inside].sum() / peak.sum()))
            masses.append(float(density[m][inside].sum()))
            shares.append(float(inside.float().mean()))
            boxes.append(inside.double() / inside.sum().clamp(min=1))
        for m, n in combinations(range(len(boxes)), 2):
            differences.append(total_variation(density[m], density[n]))
            box_differences.append(total_variation(boxes[m], boxes[n]))
    return {"pointing_game": 100 * float(np.mean(hits)), "box_mass": 100 * float(np.mean(masses)),
            "uniform_box_mass": 100 * float(np.mean(shares)),
            "map_difference": 100 * float(np.mean(differences)) if differences else float("nan"),
            "box_map_difference": 100 * float(np.mean(box_differences)) if box_differences else float("nan"),
            "num_sentences": len(hits)}


def evaluate_scenes(model: FCASTModel, processor: FCASTProcessor, test, pairs, batch_size: int,
                    grounding_images: int) -> dict:
    """Retrieval on the test scenes (long captions, the hard `pairs`: `evaluate_text_lengths`) and, with superpixels,
    grounding on the first `grounding_images` of them (`grounding_scores`)."""
    result = evaluate_text_lengths(model, processor, test, pairs, batch_size)
    if processor.needs_superpixels:  # grounding is carried to pixels per superpixel: not measured without
        result.update(grounding_scores(model, processor, test.select(range(min(grounding_images, len(test))))))
    return result


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """1/2 sum |p - q| of two maps each summing to 1: 0 for equal maps, 1 for maps on disjoint pixels."""
    return 0.5 * float((p.double() - q.double()).abs().sum())
