"""DITM's evaluation in miniature (Table IV, Fig. 8(c)) on rows with `captions` and HierarCaps-style `levels` (the
synthetic scenes): retrieval, HierarCaps precision / recall / d_corr and the image-text distance per level.

    evaluate_hierarchy(model, processor, test, batch_size=64)   # {"r1_i2t", "rsum", "d_corr", "distance_by_level", ...}

Library-side only: the remote code of the model (configuration_, modeling_, processing_ditm.py) never imports it.
"""

from __future__ import annotations

from hf_longclip.evaluation.encoding import cached_text_encoder, encode_images
from hf_longclip.evaluation.tasks import hierarcaps_task, retrieval_task
from hf_longclip.metrics.ties import DEFAULT_TIE_RULE


def evaluate_hierarchy(model, processor, test, batch_size: int, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """Retrieval over the 3 full captions of each test scene (R@1, RSUM), HierarCaps P / R / d_corr over its 4
    levels, and the mean image-text distance per level (Fig. 8(c)); ties credited by `tie_rule`
    (`hf_longclip.metrics.ties`), recorded under `tie_rule`."""
    model.eval()
    encode = cached_text_encoder(model, processor, batch_size)  # HierarCaps and the distances share the levels

    image_embeds = encode_images(model, processor, test["image"], batch_size)  # once, for all three
    retrieval = retrieval_task(test, encode, image_embeds, tie_rule=tie_rule)
    hierarchy = hierarcaps_task(test, encode, image_embeds, tie_rule)
    levels = test["levels"]
    text_embeds = encode([text for chain in levels for text in chain])
    distances = (text_embeds.reshape(len(levels), len(levels[0]), -1) - image_embeds[:, None]).norm(dim=-1)
    return {"r1_i2t": retrieval["r1_i2t"], "r1_t2i": retrieval["r1_t2i"], "rsum": retrieval["rsum"],
            **{key: hierarchy[key] for key in ("precision", "recall", "d_corr", "d_corr_image")},
            "distance_by_level": distances.mean(dim=0).tolist(), "num_images": len(test), "tie_rule": tie_rule}
