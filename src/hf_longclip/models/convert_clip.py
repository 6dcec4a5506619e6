"""OpenAI CLIP's checkpoint layout into transformers' CLIP names: the one reader of that layout, used by every
converter of a checkpoint built on it (OpenAI's `.pt`, open_clip's ViT CLIPs, Long-CLIP, HiMo-CLIP, TULIP, FLAIR),
and the `openai` / `open_clip` converters (into transformers' own `CLIPModel`, which every model's `from_clip`
starts from).

The layout: `token_embedding.weight`, `positional_embedding`, `transformer.resblocks.{i}.{ln_1, attn.in_proj_*,
attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}`, `ln_final`, `text_projection` as (width, dim), `visual.{conv1,
class_embedding, positional_embedding, ln_pre, transformer.resblocks.{i}..., ln_post, proj}`, `logit_scale`.
Sizes are read from the shapes; heads are width / 64, as OpenAI's `build_model` and open_clip's configurations set
them. Every reader takes the tensors it maps out of `state` (a dict the caller owns), so that what is left at the
end names the keys no converter understood (`check_consumed`): a different architecture is never converted
silently.
"""

from __future__ import annotations

import re

import torch

from hf_longclip.models.conversion import SourceInfo, check_consumed, load_converted, pop_weight

HEAD_WIDTH = 64  # OpenAI's and open_clip's attention head width: the number of heads is not in the state dict
# tensors of the layout that are not weights (OpenAI's model attributes, attention masks)
NOT_WEIGHTS = re.compile(r"^(input_resolution|context_length|vocab_size)$|(^|\.)attn_mask$")
OPENAI_MEAN, OPENAI_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)

_BLOCK_PARTS = {
    "ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj",
    "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2",
}

SOURCES = {
    "openai": SourceInfo(
        name="CLIP", paper="Radford et al., Learning Transferable Visual Models From Natural Language "
                            "Supervision, ICML 2021, arXiv:2103.00020",
        url="https://github.com/openai/CLIP", license="mit", checked="texts of 10 and 77 tokens and on images"),
    "open_clip": SourceInfo(
        name="OpenCLIP", paper="Cherti et al., Reproducible scaling laws for contrastive language-image "
                               "learning, CVPR 2023, arXiv:2212.07143",
        url="https://github.com/mlfoundations/open_clip", license="mit",
        checked="texts of 10 and 77 tokens and on images"),
}
SOURCES["open_clip_quickgelu"] = SOURCES["open_clip"]


def attention_heads(width: int) -> int:
    return max(1, width // HEAD_WIDTH)


def count_blocks(state: dict[str, torch.Tensor], prefix: str) -> int:
    """How many residual blocks `{prefix}resblocks.{i}.` the state dict holds."""
    pattern = re.compile(rf"{re.escape(prefix)}resblocks\.(\d+)\.")
    indices = {int(match.group(1)) for key in state if (match := pattern.match(key))}
    if indices != set(range(len(indices))):
        raise ValueError(f"the residual blocks under {prefix!r} are not numbered 0..n-1: {sorted(indices)}")
    return len(indices)


def residual_blocks(state: dict[str, torch.Tensor], source: str, target: str) -> dict[str, torch.Tensor]:
    """The pre-norm blocks `{source}resblocks.{i}` (fused `attn.in_proj_*`) as transformers' `{target}layers.{i}`
    (`CLIPEncoderLayer`: separate q/k/v projections)."""
    converted = {}
    for index in range(count_blocks(state, source)):
        block, layer = f"{source}resblocks.{index}.", f"{target}layers.{index}."
        for name in ("weight", "bias"):
            for part, tensor in zip("qkv", pop_weight(state, f"{block}attn.in_proj_{name}").chunk(3)):
                converted[f"{layer}self_attn.{part}_proj.{name}"] = tensor
            for old, new in _BLOCK_PARTS.items():
                converted[f"{layer}{new}.{name}"] = pop_weight(state, f"{block}{old}.{name}")
    return converted


def vision_tower(state: dict[str, torch.Tensor], prefix: str = "visual.") -> tuple[dict[str, torch.Tensor], dict]:
    """The ViT (`{prefix}conv1`, class and position embeddings, `ln_pre`, blocks, `ln_post`) as the state of
    transformers' `CLIPVisionModel` (keys under `vision_model.`) and its `CLIPVisionConfig` arguments.
    `{prefix}proj`, if any, stays in `state` (the caller decides where it goes)."""
    conv = pop_weight(state, f"{prefix}conv1.weight")
    positions = pop_weight(state, f"{prefix}positional_embedding")
    width, patch = conv.shape[0], conv.shape[-1]
    grid = round((positions.shape[0] - 1) ** 0.5)
    if grid * grid + 1 != positions.shape[0]:
        raise ValueError(f"{prefix}positional_embedding has {positions.shape[0]} rows: not [CLS] plus a square grid")
    layers = count_blocks(state, f"{prefix}transformer.")
    converted = {
        "vision_model.embeddings.patch_embedding.weight": conv,
        "vision_model.embeddings.class_embedding": pop_weight(state, f"{prefix}class_embedding"),
        "vision_model.embeddings.position_embedding.weight": positions,
        **residual_blocks(state, f"{prefix}transformer.", "vision_model.encoder."),
    }
    for name in ("weight", "bias"):
        converted[f"vision_model.pre_layrnorm.{name}"] = pop_weight(state, f"{prefix}ln_pre.{name}")
        converted[f"vision_model.post_layernorm.{name}"] = pop_weight(state, f"{prefix}ln_post.{name}")
    config = dict(
        hidden_size=width, num_hidden_layers=layers, num_attention_heads=attention_heads(width),
        intermediate_size=converted["vision_model.encoder.layers.0.mlp.fc1.weight"].shape[0] if layers else 4 * width,
        patch_size=patch, image_size=grid * patch, num_channels=conv.shape[1], layer_norm_eps=1e-5,
    )
    return converted, config


def text_tower(state: dict[str, torch.Tensor], positions: bool = True) -> tuple[dict[str, torch.Tensor], dict]:
    """The text transformer (`token_embedding`, `positional_embedding` unless `positions` is False, blocks,
    `ln_final`) as the state of transformers' `CLIPTextModel` (keys under `text_model.`) and its `CLIPTextConfig`
    arguments. The special ids are OpenAI's: start and end of text are the two last ids (the tower pools at the
    largest id, its end token), padding is id 0. `text_projection` stays in `state`."""
    token_embedding = pop_weight(state, "token_embedding.weight")
    vocab_size, width = token_embedding.shape
    layers = count_blocks(state, "transformer.")
    converted = {
        "text_model.embeddings.token_embedding.weight": token_embedding,
        **residual_blocks(state, "transformer.", "text_model.encoder."),
    }
    for name in ("weight", "bias"):
        converted[f"text_model.final_layer_norm.{name}"] = pop_weight(state, f"ln_final.{name}")
    config = dict(
        vocab_size=vocab_size, hidden_size=width, num_hidden_layers=layers, num_attention_heads=attention_heads(width),
        intermediate_size=converted["text_model.encoder.layers.0.mlp.fc1.weight"].shape[0] if layers else 4 * width,
        layer_norm_eps=1e-5, bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1, pad_token_id=0,
    )
    if positions:
        table = pop_weight(state, "positional_embedding")
        converted["text_model.embeddings.position_embedding.weight"] = table
        config["max_position_embeddings"] = table.shape[0]
    return converted, config


def check_tokenizer(tokenizer, text_config: dict, format_name: str) -> None:
    """Refuse a tokenizer whose end token is not the id the text tower pools at (the largest): it would pool
    elsewhere, a silently wrong result."""
    if tokenizer is not None and tokenizer.eos_token_id != text_config["eos_token_id"]:
        raise ValueError(f"{format_name} pools at the largest token id ({text_config['eos_token_id']}), the "
                         f"tokenizer's end token is {tokenizer.eos_token_id}: not this checkpoint's tokenizer")


def float_weights(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of `state_dict` in float32 (releases are often float16: converted exactly), without the tensors of
    the layout that are not weights (`NOT_WEIGHTS`)."""
    return {name: value.float() if value.is_floating_point() else value for name, value in state_dict.items()
            if not NOT_WEIGHTS.search(name)}


def clip_state_dict(state_dict: dict[str, torch.Tensor], hidden_act: str,
                    text_positions: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    """(state of a transformers `CLIPModel` in float32, `CLIPConfig` arguments) from an OpenAI-layout state dict,
    both towers with `hidden_act`. `text_positions` replaces `positional_embedding` (Long-CLIP's folded table)."""
    if "visual.proj" not in state_dict:
        kind = "a ResNet image tower" if any(k.startswith("visual.layer1.") for k in state_dict) else "no visual.proj"
        raise ValueError(f"the checkpoint has {kind}: only ViT CLIPs convert to transformers' CLIPModel")
    source = float_weights(state_dict)
    if text_positions is not None:
        source["positional_embedding"] = text_positions.float()
    vision_state, vision_config = vision_tower(source)
    text_state, text_config = text_tower(source)
    projection_dim = source["text_projection"].shape[1]
    state = {
        **vision_state, **text_state,
        "text_projection.weight": pop_weight(source, "text_projection").T,
        "visual_projection.weight": pop_weight(source, "visual.proj").T,
        "logit_scale": pop_weight(source, "logit_scale"),
    }
    check_consumed(source, "CLIP")
    return state, dict(
        text_config=dict(text_config, hidden_act=hidden_act, projection_dim=projection_dim),
        vision_config=dict(vision_config, hidden_act=hidden_act, projection_dim=projection_dim),
        projection_dim=projection_dim,
    )


def clip_image_processor(image_size: int):
    """OpenAI CLIP's preprocessing at `image_size`, which open_clip's inference transform repeats: bicubic resize of
    the short side, centre crop, OpenAI's mean and std (what Long-CLIP's and HiMo-CLIP's `_transform` do)."""
    from transformers import CLIPImageProcessorPil
    from transformers.image_utils import PILImageResampling

    return CLIPImageProcessorPil(size={"shortest_edge": image_size}, crop_size={"height": image_size,
                                                                                 "width": image_size},
                                 resample=PILImageResampling.BICUBIC, image_mean=OPENAI_MEAN, image_std=OPENAI_STD)


def _convert(state_dict, tokenizer, hidden_act: str):
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor

    state, config = clip_state_dict(state_dict, hidden_act)
    check_tokenizer(tokenizer, config["text_config"], "CLIP")
    model = load_converted(CLIPModel, CLIPConfig(**config), state)
    if tokenizer is None:
        return model, None
    tokenizer.model_max_length = config["text_config"]["max_position_embeddings"]
    image_processor = clip_image_processor(config["vision_config"]["image_size"])
    return model, CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)


def convert_openai(state_dict: dict[str, torch.Tensor], tokenizer=None):
    """OpenAI's CLIP (`ViT-B-16.pt`, a TorchScript archive or a state dict) into transformers' `CLIPModel`, with
    QuickGELU, as OpenAI trained it."""
    return _convert(state_dict, tokenizer, "quick_gelu")


def convert_open_clip(state_dict: dict[str, torch.Tensor], tokenizer=None):
    """An open_clip ViT CLIP (a `state_dict`, or a training checkpoint with `module.` prefixes) into transformers'
    `CLIPModel`, with open_clip's default GELU; a `-quickgelu` model (OpenAI's activation) is `open_clip_quickgelu`."""
    return _convert(state_dict, tokenizer, "gelu")


def convert_open_clip_quickgelu(state_dict: dict[str, torch.Tensor], tokenizer=None):
    """An open_clip `*-quickgelu` ViT CLIP (e.g. fine-tuned from OpenAI's weights) into transformers' `CLIPModel`."""
    return _convert(state_dict, tokenizer, "quick_gelu")
