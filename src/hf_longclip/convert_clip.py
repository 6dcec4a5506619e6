"""OpenAI CLIP's checkpoint layout (OpenAI's `.pt`, open_clip's ViT CLIPs, Long-CLIP, HiMo-CLIP) into transformers'
`CLIPModel` names, and the `openai` / `open_clip` converters (into transformers' own `CLIPModel`, which every
model's `from_clip` starts from).

The layout: `token_embedding.weight`, `positional_embedding`, `transformer.resblocks.{i}.{ln_1, attn.in_proj_*,
attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}`, `ln_final`, `text_projection` as (width, dim), `visual.{conv1,
class_embedding, positional_embedding, ln_pre, transformer.resblocks.{i}..., ln_post, proj}`, `logit_scale`.
Sizes are read from the shapes; heads are width / 64, as OpenAI's `build_model` and open_clip's configurations set
them. A key the mapping does not know is an error (a different architecture is never converted silently).
"""

from __future__ import annotations

import re

import torch

from hf_longclip.conversion import SourceInfo

HEAD_WIDTH = 64
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
        url="https://github.com/openai/CLIP", license="mit"),
    "open_clip": SourceInfo(
        name="OpenCLIP", paper="Cherti et al., Reproducible scaling laws for contrastive language-image "
                               "learning, CVPR 2023, arXiv:2212.07143",
        url="https://github.com/mlfoundations/open_clip", license="mit"),
}
SOURCES["open_clip_quickgelu"] = SOURCES["open_clip"]


def _blocks(source: dict, prefix: str, target: str, out: dict) -> int:
    """Map the residual blocks under `prefix` (`transformer.resblocks.`) to `target` (`...encoder.layers.`),
    splitting the fused query/key/value projection; returns the number of blocks."""
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)\.(.+)$")
    layers = set()
    for name in list(source):
        match = pattern.match(name)
        if not match:
            continue
        index, part = match.groups()
        layers.add(int(index))
        value = source.pop(name)
        if part in ("attn.in_proj_weight", "attn.in_proj_bias"):
            kind = part.rsplit("_", 1)[1]
            for projection, chunk in zip("qkv", value.chunk(3, dim=0)):
                out[f"{target}{index}.self_attn.{projection}_proj.{kind}"] = chunk
            continue
        module, _, leaf = part.rpartition(".")
        if module not in _BLOCK_PARTS:
            raise ValueError(f"unknown weight {name} in a residual block")
        out[f"{target}{index}.{_BLOCK_PARTS[module]}.{leaf}"] = value
    if layers != set(range(len(layers))):
        raise ValueError(f"the blocks under {prefix} are not numbered 0..n-1: {sorted(layers)}")
    return len(layers)


def _take(source: dict, mapping: dict[str, str], out: dict, transpose: tuple[str, ...] = ()) -> None:
    for name, target in mapping.items():
        if name not in source:
            raise ValueError(f"the checkpoint has no {name}: not OpenAI CLIP's layout (a ViT CLIP)")
        value = source.pop(name)
        out[target] = value.t() if name in transpose else value


def clip_state_dict(state_dict: dict[str, torch.Tensor], text_positions: torch.Tensor | None = None):
    """(transformers CLIPModel state dict in float32, sizes) from an OpenAI-layout state dict. `text_positions`
    replaces `positional_embedding` (Long-CLIP's folded table); sizes name what the configuration needs."""
    if "visual.proj" not in state_dict:
        kind = "a ResNet image tower" if any(k.startswith("visual.layer1.") for k in state_dict) else "no visual.proj"
        raise ValueError(f"the checkpoint has {kind}: only ViT CLIPs convert to transformers' CLIPModel")
    source = {name: value.float() for name, value in state_dict.items() if not NOT_WEIGHTS.search(name)}
    if text_positions is not None:
        source["positional_embedding"] = text_positions.float()
    out = {}
    norms = {f"{n}.{leaf}": f"{t}.{leaf}" for n, t in (("ln_final", "text_model.final_layer_norm"),
                                                       ("visual.ln_pre", "vision_model.pre_layrnorm"),
                                                       ("visual.ln_post", "vision_model.post_layernorm"))
             for leaf in ("weight", "bias")}
    _take(source, {
        "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
        "positional_embedding": "text_model.embeddings.position_embedding.weight",
        "text_projection": "text_projection.weight",
        "visual.class_embedding": "vision_model.embeddings.class_embedding",
        "visual.conv1.weight": "vision_model.embeddings.patch_embedding.weight",
        "visual.positional_embedding": "vision_model.embeddings.position_embedding.weight",
        "visual.proj": "visual_projection.weight",
        "logit_scale": "logit_scale",
        **norms,
    }, out, transpose=("text_projection", "visual.proj"))
    text_layers = _blocks(source, "transformer.resblocks.", "text_model.encoder.layers.", out)
    vision_layers = _blocks(source, "visual.transformer.resblocks.", "vision_model.encoder.layers.", out)
    if source:
        raise ValueError(f"weights the CLIP layout does not have (another architecture?): {sorted(source)[:8]}")
    vocab_size, text_width = out["text_model.embeddings.token_embedding.weight"].shape
    vision_width, _, patch, _ = out["vision_model.embeddings.patch_embedding.weight"].shape
    grid = round((out["vision_model.embeddings.position_embedding.weight"].shape[0] - 1) ** 0.5)
    sizes = dict(
        vocab_size=vocab_size, text_width=text_width, text_layers=text_layers,
        text_positions=out["text_model.embeddings.position_embedding.weight"].shape[0],
        vision_width=vision_width, vision_layers=vision_layers, patch_size=patch, image_size=patch * grid,
        projection_dim=out["text_projection.weight"].shape[0],
        text_mlp=out["text_model.encoder.layers.0.mlp.fc1.weight"].shape[0] if text_layers else 4 * text_width,
        vision_mlp=out["vision_model.encoder.layers.0.mlp.fc1.weight"].shape[0] if vision_layers else 4 * vision_width,
    )
    out["logit_scale"] = out["logit_scale"].reshape(())
    return out, sizes


def clip_config_kwargs(sizes: dict, hidden_act: str) -> dict:
    """`CLIPConfig` arguments for the sizes `clip_state_dict` read. The text's special ids are OpenAI's layout:
    start and end of text are the two last ids, padding is id 0."""
    return dict(
        text_config=dict(
            vocab_size=sizes["vocab_size"], hidden_size=sizes["text_width"], intermediate_size=sizes["text_mlp"],
            num_hidden_layers=sizes["text_layers"], num_attention_heads=sizes["text_width"] // HEAD_WIDTH,
            max_position_embeddings=sizes["text_positions"], hidden_act=hidden_act, layer_norm_eps=1e-5,
            bos_token_id=sizes["vocab_size"] - 2, eos_token_id=sizes["vocab_size"] - 1, pad_token_id=0,
            projection_dim=sizes["projection_dim"],
        ),
        vision_config=dict(
            hidden_size=sizes["vision_width"], intermediate_size=sizes["vision_mlp"],
            num_hidden_layers=sizes["vision_layers"], num_attention_heads=sizes["vision_width"] // HEAD_WIDTH,
            image_size=sizes["image_size"], patch_size=sizes["patch_size"], hidden_act=hidden_act,
            layer_norm_eps=1e-5, projection_dim=sizes["projection_dim"],
        ),
        projection_dim=sizes["projection_dim"],
    )


def clip_image_processor(image_size: int):
    """OpenAI CLIP's preprocessing at `image_size`: bicubic resize of the short side, centre crop, OpenAI's
    mean and std (what Long-CLIP's and HiMo-CLIP's `_transform` do)."""
    from transformers import CLIPImageProcessorPil
    from transformers.image_utils import PILImageResampling

    return CLIPImageProcessorPil(size={"shortest_edge": image_size}, crop_size={"height": image_size,
                                                                                 "width": image_size},
                                 resample=PILImageResampling.BICUBIC, image_mean=OPENAI_MEAN, image_std=OPENAI_STD)


def load_converted(model_class, config, state: dict):
    """`model_class(config)` holding exactly `state` (every weight, nothing left out), without random init."""
    from transformers import initialization as init

    with init.no_init_weights():
        model = model_class(config)
    state = {**state, "logit_scale": state["logit_scale"].reshape(model.logit_scale.shape)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if not name.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"converted weights do not fit {model_class.__name__}: missing {missing}, "
                         f"unexpected {unexpected}")
    return model.eval()


def _convert(state_dict, tokenizer, hidden_act: str):
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor

    state, sizes = clip_state_dict(state_dict)
    model = load_converted(CLIPModel, CLIPConfig(**clip_config_kwargs(sizes, hidden_act)), state)
    if tokenizer is None:
        return model, None
    tokenizer.model_max_length = sizes["text_positions"]
    return model, CLIPProcessor(image_processor=clip_image_processor(sizes["image_size"]), tokenizer=tokenizer)


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
