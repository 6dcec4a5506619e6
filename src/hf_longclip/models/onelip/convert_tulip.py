"""TULIP (Najdenkoska et al., ICLR 2025; github.com/ivonajdenkoska/tulip, also mderakhshani/TULIP) checkpoints as an
[`OneLIPModel`]: TULIP's text encoder is CLIP's without a position table, queries and keys of every layer rotated
(RoPE), which is OneLIP's architecture.

What the released code runs, and how it maps here:
- The checkpoint is open_clip's CLIP state dict after TULIP's second stage: `visual.*` (a ViT), the student's
  `token_embedding`, `transformer.resblocks.*`, `ln_final`, CLIP's `text_projection` and `logit_scale`, and CLIP's
  unused `positional_embedding`, which nothing reads any more (dropped).
- Its rotary forward (`open_clip/transformer_rope.py`, `apply_rotary_emb`) rotates consecutive pairs (2i, 2i + 1)
  of each head as complex numbers; transformers' RoPE rotates the halves (i, i + d/2). The query and key
  projection rows of every head are permuted from the first order to the second (the permutation transformers'
  LLaMA conversion applies), biases too: q.k is unchanged, the rotation pairs the same coordinates.
- Inference (`eval_tulip.py`) builds `TextTransformerRoPE(context_length=248)`, whose frequencies are plain RoPE
  (base 10,000): the NTK scaling of `precompute_freqs_cis_dynamic_ntk_scaling` is set only inside the second
  training stage. So the converted model has `rope_ntk_scaling=False`; with plain RoPE the length limit
  (`max_length`) is only the processor's and the check's: any length runs the same frequencies.
- The text tower is built with open_clip's default activation (exact GELU); the ViT is OpenAI's (QuickGELU, the
  activation its weights were trained with, `vision_act`).
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

from .configuration_onelip import ONELIP_TEXT_POSITIONS, OneLIPConfig
from .modeling_onelip import OneLIPModel
from .processing_onelip import OneLIPProcessor

CLIP_TEXT_POSITIONS = 77  # T_f: the CLIP TULIP distils from (kept for OneLIP fine-tuning: TRIM-Refine's queries)


def interleaved_to_half_split(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Rows of a query/key projection (weight (D, D_in) or bias (D,)) reordered per head from RoPE's interleaved
    pairs (2i, 2i + 1) to transformers' half-split pairs (i, i + d/2)."""
    head_dim = weight.shape[0] // num_heads
    rest = weight.shape[1:]
    return weight.reshape(num_heads, head_dim // 2, 2, *rest).transpose(1, 2).reshape(weight.shape)


def convert(
    state_dict: dict[str, torch.Tensor], tokenizer: CLIPTokenizer | None = None, *,
    max_length: int = ONELIP_TEXT_POSITIONS, text_heads: int | None = None, vision_heads: int | None = None,
    vision_act: str = "quick_gelu",
) -> tuple[OneLIPModel, OneLIPProcessor | None]:
    """A TULIP state dict (prefixes already removed) as an `OneLIPModel` in float32, and its processor when a
    `tokenizer` is given (texts of `max_length` tokens). Heads default to open_clip's width / 64."""
    state = {key: value.float() if value.is_floating_point() else value for key, value in state_dict.items()}
    state.pop("positional_embedding", None)  # CLIP's table: TULIP's RoPE encoder does not read it
    vision_state, vision_config = vision_tower(state)
    if vision_heads:
        vision_config["num_attention_heads"] = vision_heads
    vision_config["hidden_act"] = vision_act
    visual_projection = pop(state, "visual.proj")
    token_embedding = pop(state, "token_embedding.weight")
    text_projection = pop(state, "text_projection")
    vocab_size, width = token_embedding.shape
    heads = text_heads or max(1, width // OPENCLIP_HEAD_WIDTH)
    layers = count_blocks(state, "transformer.")
    text_state = residual_blocks(state, "transformer.", "text_model.encoder.")
    for key in list(text_state):
        if ".self_attn.q_proj." in key or ".self_attn.k_proj." in key:
            text_state[key] = interleaved_to_half_split(text_state[key], heads)
    converted = {
        **vision_state, **text_state,
        "text_model.embeddings.token_embedding.weight": token_embedding,
        "text_model.final_layer_norm.weight": pop(state, "ln_final.weight"),
        "text_model.final_layer_norm.bias": pop(state, "ln_final.bias"),
        "text_projection.weight": text_projection.T.contiguous(),
        "visual_projection.weight": visual_projection.T.contiguous(),
        "logit_scale": pop(state, "logit_scale").reshape(1),
    }
    check_consumed(state, "TULIP")
    special = special_token_ids(vocab_size, tokenizer, "TULIP")
    config = OneLIPConfig(
        text_config=dict(
            vocab_size=vocab_size, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=text_state["text_model.encoder.layers.0.mlp.fc1.weight"].shape[0], hidden_act="gelu",
            layer_norm_eps=1e-5, max_position_embeddings=max_length, base_length=CLIP_TEXT_POSITIONS,
            rope_ntk_scaling=False, **special,
        ),
        vision_config=vision_config, projection_dim=text_projection.shape[1],
        logit_scale_init_value=float(converted["logit_scale"]),
    )
    model = OneLIPModel(config)
    missing, unexpected = model.load_state_dict(converted, strict=False)
    missing = [key for key in missing if not key.startswith("trim_refine.")]  # training-only queries: initialised
    if missing or unexpected:
        raise ValueError(f"TULIP conversion does not fill OneLIPModel: missing {missing}, unexpected {unexpected}")
    processor = None
    if tokenizer is not None:
        image_processor = clip_image_processor(vision_config["image_size"])
        processor = OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=max_length)
    return model.eval(), processor


__all__ = ["convert", "interleaved_to_half_split"]
