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

from hf_longclip.openclip_layout import (
    OPENCLIP_HEAD_WIDTH,
    check_consumed,
    clip_image_processor,
    count_blocks,
    pop,
    residual_blocks,
    special_token_ids,
    vision_tower,
)

from .configuration_fcast import FCASTConfig
from .modeling_fcast import FCASTModel
from .processing_fcast import FCASTProcessor

FLAIR_POOL_HEADS = 8  # PureAttentionPoolingBlock's n_head, never changed by FLAIR's model


def convert(
    state_dict: dict[str, torch.Tensor], tokenizer: CLIPTokenizer | None = None, *, text_heads: int | None = None,
    vision_heads: int | None = None, act: str = "gelu",
) -> tuple[FCASTModel, FCASTProcessor | None]:
    """A FLAIR state dict (prefixes already removed) as an `FCASTModel` in float32, and its processor (CLIP image
    preprocessing, a caption as one chunk of 77 tokens) when a `tokenizer` is given. `act` is both towers' activation
    (open_clip's default GELU, as FLAIR's configurations); heads default to open_clip's width / 64."""
    state = {key: value.float() if value.is_floating_point() else value for key, value in state_dict.items()}
    vision_state, vision_config = vision_tower(state)
    if vision_heads:
        vision_config["num_attention_heads"] = vision_heads
    vision_config["hidden_act"] = act
    token_embedding = pop(state, "token_embedding.weight")
    positions = pop(state, "positional_embedding")
    vocab_size, width = token_embedding.shape
    layers = count_blocks(state, "transformer.")
    converted = {
        **vision_state, **residual_blocks(state, "transformer.", "text_model.encoder."),
        "text_model.embeddings.token_embedding.weight": token_embedding,
        "text_model.embeddings.position_embedding.weight": positions,
        "text_projection.weight": pop(state, "text_post.proj").T.contiguous(),
        "visual_projection.weight": pop(state, "image_post.proj").T.contiguous(),
    }
    for name in ("weight", "bias"):
        converted[f"text_model.final_layer_norm.{name}"] = pop(state, f"ln_final.{name}")
        for ours, theirs in (("query_norm", "ln_q"), ("token_norm", "ln_k"), ("value_norm", "ln_v")):
            converted[f"grounding_pool.{ours}.{name}"] = pop(state, f"visual_proj.{theirs}.{name}")
        for part in ("in_proj_", "out_proj."):
            converted[f"grounding_pool.attention.{part}{name}"] = pop(state, f"visual_proj.attn.{part}{name}")
    logit_scale, logit_bias = pop(state, "logit_scale").reshape(1), pop(state, "logit_bias").reshape(1)
    converted.update(logit_scale=logit_scale, logit_bias=logit_bias, part_logit_scale=logit_scale.clone(),
                     part_logit_bias=logit_bias.clone())
    check_consumed(state, "FLAIR")
    special = special_token_ids(vocab_size, tokenizer, "FLAIR")
    projection_dim = converted["visual_projection.weight"].shape[0]
    config = FCASTConfig(
        vision_backbone="vit", vision_config=vision_config, attention_pooling="flair", pool_heads=FLAIR_POOL_HEADS,
        projection_dim=projection_dim,
        text_config=dict(
            vocab_size=vocab_size, hidden_size=width, num_hidden_layers=layers,
            num_attention_heads=text_heads or max(1, width // OPENCLIP_HEAD_WIDTH),
            intermediate_size=converted["text_model.encoder.layers.0.mlp.fc1.weight"].shape[0], hidden_act=act,
            layer_norm_eps=1e-5, max_position_embeddings=positions.shape[0], num_stage2_layers=0, num_chunks=1,
            **special,
        ),
        whole_logit_scale_init_value=float(logit_scale), part_logit_scale_init_value=float(logit_scale),
        whole_logit_bias_init_value=float(logit_bias), part_logit_bias_init_value=float(logit_bias),
    )
    model = FCASTModel(config)
    missing, unexpected = model.load_state_dict(converted, strict=False)
    if missing or unexpected:
        raise ValueError(f"FLAIR conversion does not fill FCASTModel: missing {missing}, unexpected {unexpected}")
    processor = None
    if tokenizer is not None:
        image_processor = clip_image_processor(vision_config["image_size"])
        processor = FCASTProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                   max_length=positions.shape[0], num_chunks=1, needs_superpixels=False)
    return model.eval(), processor


__all__ = ["FLAIR_POOL_HEADS", "convert"]
