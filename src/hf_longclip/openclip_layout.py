"""The OpenAI / open_clip state-dict layout read into transformers' CLIP modules, for converters of released
checkpoints built on it (TULIP, FLAIR): `visual.conv1`, `visual.transformer.resblocks.{i}.attn.in_proj_weight`, ...
Every function takes the tensors it maps out of `state` (a dict the caller owns), so that what is left at the end
names the keys no converter understood (`check_consumed`)."""

import re

import torch
from transformers import CLIPImageProcessorPil

OPENCLIP_HEAD_WIDTH = 64  # open_clip's (and OpenAI's) attention head width: heads are not in the state dict
_BLOCK_KEYS = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj",
               "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}


def count_blocks(state: dict[str, torch.Tensor], prefix: str) -> int:
    """How many residual blocks `{prefix}resblocks.{i}.` the state dict holds."""
    pattern = re.compile(rf"{re.escape(prefix)}resblocks\.(\d+)\.")
    indices = {int(match.group(1)) for key in state if (match := pattern.match(key))}
    if indices != set(range(len(indices))):
        raise ValueError(f"the residual blocks under {prefix!r} are not numbered 0..n-1: {sorted(indices)}")
    return len(indices)


def pop(state: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    """`state[key]`, removed from `state`; a missing key is named in the error."""
    if key not in state:
        raise ValueError(f"the checkpoint has no {key!r}: not the layout this converter reads")
    return state.pop(key)


def residual_blocks(state: dict[str, torch.Tensor], source: str, target: str) -> dict[str, torch.Tensor]:
    """open_clip's `{source}resblocks.{i}` (pre-norm blocks, fused `attn.in_proj_*`) as transformers'
    `{target}layers.{i}` (`CLIPEncoderLayer`: separate q/k/v projections)."""
    converted = {}
    for index in range(count_blocks(state, source)):
        block, layer = f"{source}resblocks.{index}.", f"{target}layers.{index}."
        for name in ("weight", "bias"):
            for part, tensor in zip(("q", "k", "v"), pop(state, f"{block}attn.in_proj_{name}").chunk(3)):
                converted[f"{layer}self_attn.{part}_proj.{name}"] = tensor
            for old, new in _BLOCK_KEYS.items():
                converted[f"{layer}{new}.{name}"] = pop(state, f"{block}{old}.{name}")
    return converted


def vision_tower(state: dict[str, torch.Tensor], prefix: str = "visual.") -> tuple[dict[str, torch.Tensor], dict]:
    """open_clip's ViT (`{prefix}conv1`, class and position embeddings, `ln_pre`, blocks, `ln_post`) as the state of
    transformers' `CLIPVisionModel` (keys under `vision_model.`) and its `CLIPVisionConfig` arguments, sizes read
    from the tensors. `{prefix}proj`, if any, stays in `state` (the caller decides where it goes)."""
    conv = pop(state, f"{prefix}conv1.weight")
    positions = pop(state, f"{prefix}positional_embedding")
    width, patch = conv.shape[0], conv.shape[-1]
    grid = round((positions.shape[0] - 1) ** 0.5)
    if grid * grid + 1 != positions.shape[0]:
        raise ValueError(f"{prefix}positional_embedding has {positions.shape[0]} rows: not [CLS] plus a square grid")
    converted = {
        "vision_model.embeddings.patch_embedding.weight": conv,
        "vision_model.embeddings.class_embedding": pop(state, f"{prefix}class_embedding"),
        "vision_model.embeddings.position_embedding.weight": positions,
    }
    for name in ("weight", "bias"):
        converted[f"vision_model.pre_layrnorm.{name}"] = pop(state, f"{prefix}ln_pre.{name}")
        converted[f"vision_model.post_layernorm.{name}"] = pop(state, f"{prefix}ln_post.{name}")
    layers = count_blocks(state, f"{prefix}transformer.")
    converted.update(residual_blocks(state, f"{prefix}transformer.", "vision_model.encoder."))
    config = dict(
        hidden_size=width, num_hidden_layers=layers,
        num_attention_heads=max(1, width // OPENCLIP_HEAD_WIDTH),
        intermediate_size=converted["vision_model.encoder.layers.0.mlp.fc1.weight"].shape[0],
        patch_size=patch, image_size=grid * patch, num_channels=conv.shape[1], layer_norm_eps=1e-5,
    )
    return converted, config


def special_token_ids(vocab_size: int, tokenizer, format_name: str) -> dict[str, int]:
    """Text config token ids for an open_clip text tower, which pools at the largest token id (its end token): the
    tokenizer's ids when one is given (refused if its end token is not that id)."""
    special = dict(bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1)
    if tokenizer is not None:
        if tokenizer.eos_token_id != vocab_size - 1:
            raise ValueError(f"{format_name} pools at the largest token id ({vocab_size - 1}), the tokenizer's end "
                             f"token is {tokenizer.eos_token_id}: not this checkpoint's tokenizer")
        special.update(bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id)
    return special


def clip_image_processor(size: int) -> CLIPImageProcessorPil:
    """open_clip's inference preprocessing of a `size` px ViT: resize, centre crop, OpenAI's mean and std."""
    return CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})


def check_consumed(state: dict[str, torch.Tensor], format_name: str) -> None:
    """Raise if a converter left keys it did not read: a checkpoint of another layout, never silently dropped."""
    if state:
        raise ValueError(f"keys a {format_name} checkpoint does not have (another format?): {sorted(state)[:10]}"
                         f"{' ...' if len(state) > 10 else ''}")


__all__ = ["OPENCLIP_HEAD_WIDTH", "check_consumed", "clip_image_processor", "count_blocks", "pop",
           "residual_blocks", "special_token_ids", "vision_tower"]
