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
  activation its weights were trained with).
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

from .configuration_onelip import ONELIP_TEXT_POSITIONS, OneLIPConfig
from .modeling_onelip import OneLIPModel
from .processing_onelip import OneLIPProcessor

CLIP_TEXT_POSITIONS = 77  # T_f: the CLIP TULIP distils from (kept for OneLIP fine-tuning: TRIM-Refine's queries)

_ONELIP_TABLE1, _ONELIP_TABLE2 = "OneLIP paper, Table 1", "OneLIP paper, Table 2"
_HIMO_TABLE1, _HIMO_REPO = "HiMo-CLIP paper, Table 1", "https://github.com/UnicomAI/HiMo-CLIP"
SOURCES = {
    "tulip": SourceInfo(
        name="TULIP", paper="Najdenkoska et al., TULIP: Token-length Upgraded CLIP, ICLR 2025, arXiv:2410.10034",
        url="https://github.com/ivonajdenkoska/tulip (checked at 132c174; checkpoints: mderakhshani/TULIP)",
        license="apache-2.0",  # the repository's LICENSE, Apache-2.0 since its first commit (ae9789c)
        checked="texts of 10, 100, 240 and 260 tokens and on images",
        test_file="tests/conversion/test_convert_tulip_flair.py",
        reported=tuple(result for args in (
            ("ShareGPT4V-1k", 98.6, 98.6, _ONELIP_TABLE1, "ViT-B/16"),
            ("Urban1k", 88.1, 86.6, _ONELIP_TABLE1, "ViT-B/16"),
            ("ShareGPT4V-1k", 99.0, 99.0, _ONELIP_TABLE1, "ViT-L/14"),
            ("Urban1k", 90.1, 91.1, _ONELIP_TABLE1, "ViT-L/14"),
            ("COCO", 56.8, 40.7, _ONELIP_TABLE2, "ViT-B/16"), ("Flickr30k (all 31,783 images)", 46.1, 35.2,
                                                              _ONELIP_TABLE2, "ViT-B/16"),
            ("COCO", 62.6, 46.1, _ONELIP_TABLE2, "ViT-L/14"), ("Flickr30k (all 31,783 images)", 56.7, 41.6,
                                                              _ONELIP_TABLE2, "ViT-L/14"),
        ) for result in reported_retrieval(*args)) + tuple(result for args in (
            ("DOCCI", 75.5, 75.8, _HIMO_TABLE1, "ViT-B/16"), ("Long-DCI", 50.2, 50.6, _HIMO_TABLE1, "ViT-B/16"),
            ("DOCCI", 75.5, 75.8, _HIMO_TABLE1, "ViT-L/14"), ("Long-DCI", 55.7, 56.4, _HIMO_TABLE1, "ViT-L/14"),
        ) for result in reported_retrieval(*args, source_url=_HIMO_REPO))),
}


def interleaved_to_half_split(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Rows of a query/key projection (weight (D, D_in) or bias (D,)) reordered per head from RoPE's interleaved
    pairs (2i, 2i + 1) to transformers' half-split pairs (i, i + d/2)."""
    head_dim = weight.shape[0] // num_heads
    rest = weight.shape[1:]
    return weight.reshape(num_heads, head_dim // 2, 2, *rest).transpose(1, 2).reshape(weight.shape)


def convert(
    state_dict: dict[str, torch.Tensor], tokenizer: CLIPTokenizer | None = None, *,
    max_length: int = ONELIP_TEXT_POSITIONS,
) -> tuple[OneLIPModel, OneLIPProcessor | None]:
    """A TULIP state dict (as `load_original_checkpoint` reads it) as an `OneLIPModel` in float32, and its
    processor when a `tokenizer` is given (texts of `max_length` tokens)."""
    state = float_weights(state_dict)
    state.pop("positional_embedding", None)  # CLIP's table: TULIP's RoPE encoder does not read it
    vision_state, vision_config = vision_tower(state)
    text_state, text_config = text_tower(state, positions=False)
    for key in list(text_state):
        if ".self_attn.q_proj." in key or ".self_attn.k_proj." in key:
            text_state[key] = interleaved_to_half_split(text_state[key], text_config["num_attention_heads"])
    text_projection = pop_weight(state, "text_projection")
    converted = {
        **vision_state, **text_state,
        "text_projection.weight": text_projection.T,
        "visual_projection.weight": pop_weight(state, "visual.proj").T,
        "logit_scale": pop_weight(state, "logit_scale"),
    }
    check_consumed(state, "TULIP")
    check_tokenizer(tokenizer, text_config, "TULIP")
    config = OneLIPConfig(
        text_config=dict(text_config, hidden_act="gelu", max_position_embeddings=max_length,
                         base_length=CLIP_TEXT_POSITIONS, rope_ntk_scaling=False),
        vision_config=dict(vision_config, hidden_act="quick_gelu"), projection_dim=text_projection.shape[1],
        logit_scale_init_value=float(converted["logit_scale"]),
    )
    model = load_converted(OneLIPModel, config, converted)
    if tokenizer is None:
        return model, None
    tokenizer.model_max_length = max_length
    image_processor = clip_image_processor(vision_config["image_size"])
    return model, OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=max_length)


__all__ = ["convert", "interleaved_to_half_split"]
