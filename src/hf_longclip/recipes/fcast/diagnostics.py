"""How F-CAST's two terms share the text encoder (docs/models/fcast.md, "Why F-CAST trails its ablation here"):

    term_readings(task, batch)                  # each term, L_part's positive pairs, each term's gradient norm on
                                                # stage 1 and the cosine between the two gradients there
    sub_caption_similarity(model, processor, captions)  # mean cosine of t^sub of chunks of different captions
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_longclip.models.fcast.modeling_fcast import FCASTModel
from hf_longclip.models.fcast.processing_fcast import FCASTProcessor
from hf_longclip.objectives.fcast import text_grounded_pairs

#: the hierarchical text encoder's stage 1 (Eq. 1-2), whose output gives both t^sub (L_part) and t^long (L_whole)
STAGE1 = "text_model."


def term_readings(task, batch: dict, prefix: str = STAGE1) -> dict:
    """One step of an `FCASTTask` (two-level loss) on `batch`, no update: `terms` (each term's value), `part_positives`
    (the share of L_part from each image's own K sub-captions, Eq. 7 with y = +1), `gradient_norms` (each term's
    gradient norm over the parameters named `prefix`*, stage 1 by default) and, with both terms, `gradient_cosine`
    (the cosine between the two gradients there: < 0 where they pull stage 1 apart)."""
    model = task.model
    encoded = task.encode(model, batch)
    terms = task.loss(model, encoded, batch)
    names, params = zip(*[(name, p) for name, p in model.named_parameters() if name.startswith(prefix)])
    gradients = {}
    for term, value in terms.items():
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        gradients[term] = torch.cat([(torch.zeros_like(p) if g is None else g).flatten()
                                     for p, g in zip(params, grads)])
    readings = {"terms": {term: float(value.detach()) for term, value in terms.items()},
                "gradient_norms": {term: float(g.norm()) for term, g in gradients.items()}}
    if "part_loss" in terms:
        with torch.no_grad():
            pairs = text_grounded_pairs(encoded["sub_embeds"], encoded["grounding_tokens"],
                                        encoded["grounding_padding"], model.grounding_pool,
                                        encoded["part_logit_scale"], encoded["part_logit_bias"])[0]
        readings["part_positives"] = float(pairs[:, : encoded["sub_embeds"].shape[1]].sum() / pairs.sum())
        readings["gradient_cosine"] = float(F.cosine_similarity(gradients["part_loss"], gradients["whole_loss"],
                                                                dim=0))
    return readings


@torch.no_grad()
def sub_caption_similarity(model: FCASTModel, processor: FCASTProcessor, captions: list[str],
                           batch_size: int = 64) -> float:
    """Mean cosine between the sub-caption embeddings t^sub (Eq. 1-2, projected) of the balanced chunks of two
    different captions, over every such pair: how far stage 1 and the projection keep chunks of different captions
    apart (near 1: the chunk embeddings have collapsed onto one direction)."""
    model.eval()
    embeds = []
    for start in range(0, len(captions), batch_size):
        inputs = processor(text=captions[start:start + batch_size], padding="longest").to(model.device)
        subs = model.get_text_features(inputs["input_ids"], inputs["attention_mask"]).sub_caption_embeds
        embeds.append(F.normalize(subs.float(), dim=-1).cpu())
    embeds = torch.cat(embeds)  # (captions, N, D)
    owner = torch.arange(embeds.shape[0]).repeat_interleave(embeds.shape[1])
    cosines = embeds.flatten(0, 1) @ embeds.flatten(0, 1).T
    different = owner[:, None] != owner[None]
    return float(cosines[different].mean())


__all__ = ["STAGE1", "sub_caption_similarity", "term_readings"]
