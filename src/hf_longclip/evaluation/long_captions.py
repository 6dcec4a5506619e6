"""The long-caption evaluation that several models' miniature protocols share, on rows with `caption` and
`sentences` (the synthetic scenes): R@1 both ways with one long caption per image (HiMo-CLIP's, OneLIP's and
F-CAST's tables), and OneLIP's recall by caption length (Table 1 / Table 4, Fig. 3; F-CAST's script runs it too):
R@1 with the long captions, with their first sentence alone, and within hard-negative pairs whose captions differ
only after the token limit.

    recall_at_1_both_ways(image_embeds, caption_embeds)   # {"r1_i2t", "r1_t2i"}
    pairs = late_difference_pairs(test, tokenizer, 77)
    evaluate_text_lengths(model, processor, test, pairs)   # {"r1_i2t", "short_r1_i2t", "hard_r1_i2t", ...}
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..data.synthetic import hard_negative_indices
from ..metrics.retrieval import pair_recall_at_1, recall_at_1_by_text, recall_at_k
from ..metrics.ties import DEFAULT_TIE_RULE
from .encoding import ImageColumn, encode_images, encode_texts


def recall_at_1_both_ways(image_embeds: torch.Tensor, caption_embeds: torch.Tensor,
                          tie_rule: str = DEFAULT_TIE_RULE) -> dict[str, float]:
    """R@1 image-to-text (`r1_i2t`) and text-to-image (`r1_t2i`) of images and their captions, one each, in the same
    order; ties credited by `tie_rule` (`hf_longclip.metrics.ties`)."""
    similarity = image_embeds @ caption_embeds.T
    return {"r1_i2t": recall_at_k(similarity, 1, tie_rule), "r1_t2i": recall_at_k(similarity.T, 1, tie_rule)}


def late_difference_pairs(dataset, tokenizer, length: int = 77) -> list[tuple[int, int]]:
    """Row indices of the synthetic scenes' hard-negative pairs (two rows sharing `group_id`) whose captions agree on
    their first `length` tokens under `tokenizer` and differ later: a text encoder that reads only `length` tokens
    sees the same text twice (OneLIP's late-token test)."""
    ids = tokenizer(list(dataset["caption"]), verbose=False)["input_ids"]
    return [(a, b) for a, b in hard_negative_indices(dataset)
            if ids[a] != ids[b] and ids[a][:length] == ids[b][:length]]


def evaluate_text_lengths(model, processor, dataset, hard_pairs: Sequence[tuple[int, int]], batch_size: int = 128,
                          progress: bool = False, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """OneLIP's Table 1 / Table 4 miniature on rows with `caption`, `sentences` (the synthetic scenes): R@1 both
    ways with the whole captions (`r1_*`, long text); with each caption's first sentence alone (`short_r1_*`, short
    text; identical first sentences are one text, see `recall_at_1_by_text`); and within the `hard_pairs` (see
    `late_difference_pairs`, `pair_recall_at_1`: `hard_r1_*`, chance 50). Texts are truncated by `processor`. Every
    recall credits ties by `tie_rule` (`hf_longclip.metrics.ties`; fair: a tie in a pair counts 1/2, two captions
    that a truncating encoder reads alike share R@1 at random), recorded under `tie_rule`."""
    model.eval()
    image_embeds = encode_images(model, processor, ImageColumn(dataset), batch_size, progress)
    long_embeds = encode_texts(model, processor, dataset["caption"], batch_size, progress)
    first = [sentences[0] for sentences in dataset["sentences"]]
    distinct = sorted(set(first))
    owners = torch.tensor([distinct.index(text) for text in first])
    short_i2t, short_t2i = recall_at_1_by_text(image_embeds, encode_texts(model, processor, distinct, batch_size),
                                               owners, tie_rule)
    hard_i2t, hard_t2i = pair_recall_at_1(image_embeds, long_embeds, hard_pairs, tie_rule)
    return {**recall_at_1_both_ways(image_embeds, long_embeds, tie_rule), "short_r1_i2t": short_i2t,
            "short_r1_t2i": short_t2i, "hard_r1_i2t": hard_i2t, "hard_r1_t2i": hard_t2i, "num_images": len(dataset),
            "num_short_texts": len(distinct), "num_hard_pairs": len(hard_pairs), "tie_rule": tie_rule}
