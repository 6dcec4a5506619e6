"""HiMo-CLIP's evaluation summary: R@1 on full captions, HiMo@2 / HiMo@3 / HiMo@K, SSI and HiDe's kept components,
the numbers of `examples/train_himo.py`'s table.

    evaluate_long_captions(model, processor, test, hide_tau=0.9)   # {"r1_i2t", "himo@k", "ssi", "hide_m", ...}

Library-side only: the remote code of the model (configuration_, modeling_, processing_himo_clip.py) never imports it.
"""

from __future__ import annotations

from hf_longclip.evaluation.encoding import ImageColumn, cached_text_encoder, encode_images
from hf_longclip.evaluation.long_captions import recall_at_1_both_ways
from hf_longclip.evaluation.tasks import himo_task, ssi_task
from hf_longclip.metrics.ties import DEFAULT_TIE_RULE
from hf_longclip.objectives.himo_clip import kept_components


def evaluate_long_captions(model, processor, dataset, batch_size: int = 128, progress: bool = True,
                           hide_tau: float | None = None, hide_batch_size: int = 64,
                           tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """The main job's summary: R@1 both ways on full captions, HiMo@2 / HiMo@3 (Eq. 6) on K cumulative segments,
    HiMo@K (Eq. 5) on all sentence prefixes, the mean similarity at each prefix length (for plots) and, where rows
    carry a `distractor`, SSI (Eq. 22, distractor appended). With `hide_tau`: `hide_m`, the mean number of principal
    components HiDe keeps at that threshold over consecutive batches of `hide_batch_size` test captions. R@1 and
    HiMo@2 / HiMo@3 credit ties by `tie_rule` (`hf_longclip.metrics.ties`), recorded under `tie_rule`."""
    model.eval()
    encode = cached_text_encoder(model, processor, batch_size, progress)  # SSI rescores HiMo@K's prefixes
    image_embeds = encode_images(model, processor, ImageColumn(dataset), batch_size, progress)
    caption_embeds = encode(dataset["caption"])
    himo = himo_task(dataset.select_columns(["sentences"]), encode, image_embeds, tie_rule)
    results = {**recall_at_1_both_ways(image_embeds, caption_embeds, tie_rule),
               **{key: himo[key] for key in ("himo@2", "himo@3", "himo@k", "mean_similarity_by_prefix",
                                             "num_images", "num_prefixes", "tie_rule")}}
    if "distractor" in dataset.column_names:
        results["ssi"] = ssi_task(dataset.select_columns(["sentences", "distractor"]), encode, image_embeds)["ssi"]
    if hide_tau is not None:
        batches = caption_embeds.split(hide_batch_size)
        results["hide_m"] = sum(kept_components(batch, hide_tau) for batch in batches) / len(batches)
    return results
