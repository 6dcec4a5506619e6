"""FLAIR (Xiao et al., CVPR 2025; github.com/xiaorui638/flair, `flair-cc3m-recap.pt` ... `flair-merged30m.pt`)
checkpoints as an [`FCASTModel`] in its FLAIR configuration: a ViT vision tower, CLIP's flat text encoder (one
chunk of 77 tokens) and FLAIR's text-conditioned attention pooling (`attention_pooling="flair"`).

FLAIR's state dict (`src/flair/model.py`, class `FLAIR`): open_clip's ViT under `visual.` without `visual.proj`
(the projection is `image_post.proj`, shared by the [CLS] and the patch tokens), open_clip's text tower at the top
level without `text_projection` (`text_post.proj`), `visual_proj` (`PureAttentionPoolingBlock`: `attn` an
`nn.MultiheadAttention` with `add_zero_attn`, 8 heads, `ln_q`, `ln_k`, `ln_v`), `logit_scale` and `logit_bias`
(one pair, FLAIR's single sigmoid loss: F-CAST's part-level pair is set to the same values).
"""

import torch
from transformers import CLIPTokenizer

from hf_longclip.models.conversion import SourceInfo, check_consumed, load_converted, pop_weight, reported_retrieval
from hf_longclip.models.convert_clip import (
    check_tokenizer,
    clip_image_processor,
    float_weights,
    text_tower,
    vision_tower,
)

from .configuration_fcast import FCASTConfig
from .modeling_fcast import FCASTModel
from .processing_fcast import FCASTProcessor

FLAIR_POOL_HEADS = 8  # PureAttentionPoolingBlock's n_head, never changed by FLAIR's model
FLAIR_ACTIVATION = "gelu"  # open_clip's default, which FLAIR's configurations keep in both towers

_FCAST_TABLE1 = "F-CAST paper, Table 1"
_FLAIR_REPO = "https://github.com/ExplainableML/flair"
_FLAIR_README = "FLAIR's README (ExplainableML/flair at 0f9ce05)"
SOURCES = {
    "flair": SourceInfo(
        name="FLAIR", paper="Xiao et al., FLAIR: VLM with Fine-grained Language-informed Image Representations, "
                            "CVPR 2025, arXiv:2412.03561",
        url="https://huggingface.co/xiaorui638/flair (code: https://github.com/ExplainableML/flair, checked at "
            "0f9ce05)",
        license="unknown",  # ExplainableML/flair holds no LICENSE file and its README names none
        checked="texts of 10 and 77 tokens (FLAIR reads 77) and on images, both the CLIP-style and the "
                "text-conditioned logits",
        test_file="tests/conversion/test_convert_tulip_flair.py",
        reported=tuple(result for args in (
            ("DCI", 61.3, 66.2), ("DOCCI", 70.3, 72.6), ("ShareGPT4V-1k", 98.5, 98.0), ("ShareGPT4V-10k", 90.3, 89.4),
            ("Urban1k", 83.6, 87.7), ("IIW", 91.3, 91.5),
        ) for result in reported_retrieval(*args, _FCAST_TABLE1, "flair-merged30m")) + tuple(
            result for model, coco, flickr in (  # the README lists T2I before I2T
                ("flair-cc3m-recap", (51.6, 37.7), (78.7, 65.7)), ("flair-cc12m-recap", (64.1, 47.8), (90.8, 75.4)),
                ("flair-yfcc15m-recap", (67.3, 51.2), (93.3, 79.2)), ("flair-merged30m", (68.0, 53.3), (94.7, 81.1)))
            for dataset, pair in (("COCO", coco), ("Flickr30k", flickr))
            for result in reported_retrieval(dataset, *pair, _FLAIR_README, model, _FLAIR_REPO))),
}


def convert(
    state_dict: dict[str, torch.Tensor], tokenizer: CLIPTokenizer | None = None,
) -> tuple[FCASTModel, FCASTProcessor | None]:
    """A FLAIR state dict (as `load_original_checkpoint` reads it) as an `FCASTModel` in float32, and its processor
    (CLIP image preprocessing, a caption as one chunk of 77 tokens) when a `tokenizer` is given."""
    state = float_weights(state_dict)
    vision_state, vision_config = vision_tower(state)
    text_state, text_config = text_tower(state)
    converted = {
        **vision_state, **text_state,
        "text_projection.weight": pop_weight(state, "text_post.proj").T,
        "visual_projection.weight": pop_weight(state, "image_post.proj").T,
    }
    for name in ("weight", "bias"):
        for ours, theirs in (("query_norm", "ln_q"), ("token_norm", "ln_k"), ("value_norm", "ln_v")):
            converted[f"grounding_pool.{ours}.{name}"] = pop_weight(state, f"visual_proj.{theirs}.{name}")
        for part in ("in_proj_", "out_proj."):
            converted[f"grounding_pool.attention.{part}{name}"] = pop_weight(state, f"visual_proj.attn.{part}{name}")
    # FLAIR's single sigmoid loss has one pair; F-CAST's part-level pair is set to the same values
    logit_scale, logit_bias = pop_weight(state, "logit_scale").reshape(1), pop_weight(state, "logit_bias").reshape(1)
    converted.update(logit_scale=logit_scale, logit_bias=logit_bias, part_logit_scale=logit_scale.clone(),
                     part_logit_bias=logit_bias.clone())
    check_consumed(state, "FLAIR")
    check_tokenizer(tokenizer, text_config, "FLAIR")
    max_length = text_config["max_position_embeddings"]
    config = FCASTConfig(
        vision_backbone="vit", vision_config=dict(vision_config, hidden_act=FLAIR_ACTIVATION),
        attention_pooling="flair", pool_heads=FLAIR_POOL_HEADS,
        projection_dim=converted["visual_projection.weight"].shape[0],
        text_config=dict(text_config, hidden_act=FLAIR_ACTIVATION, num_stage2_layers=0, num_chunks=1),
        whole_logit_scale_init_value=float(logit_scale), part_logit_scale_init_value=float(logit_scale),
        whole_logit_bias_init_value=float(logit_bias), part_logit_bias_init_value=float(logit_bias),
    )
    model = load_converted(FCASTModel, config, converted)
    if tokenizer is None:
        return model, None
    tokenizer.model_max_length = max_length
    image_processor = clip_image_processor(vision_config["image_size"])
    return model, FCASTProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=max_length,
                                 num_chunks=1, needs_superpixels=False)


__all__ = ["FLAIR_POOL_HEADS", "convert"]
