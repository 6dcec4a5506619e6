"""A long text tower as the text encoder of a diffusers pipeline (plug-and-play long prompts in text-to-image).

Stable Diffusion conditions its UNet on the text encoder's last hidden state, one vector per token, and pads or
truncates prompts to `tokenizer.model_max_length` (77 for CLIP). Give the pipeline a long model's text tower and a
tokenizer with `model_max_length` set to the tower's length, and prompts of up to that many tokens reach the UNet
whole::

    text_encoder, max_length = text_encoder_for_diffusion(model)
    tokenizer = CLIPTokenizer.from_pretrained(checkpoint, model_max_length=max_length)
    pipe = StableDiffusionPipeline.from_pretrained(sd_checkpoint, text_encoder=text_encoder, tokenizer=tokenizer)

The UNet's `cross_attention_dim` must equal the tower's width (768 for CLIP ViT-L/14's text tower, which SD 1.x
uses). Nothing is retrained, as in the paper.

The adapter that plugs a model in
---------------------------------
The model files know nothing of diffusers: this module holds one adapter per model class, in `TEXT_ENCODERS`
(`register_text_encoder(model_class, adapter)` adds one; `text_encoder_for_diffusion` takes the adapter of the
model's class or of its nearest base class). ``adapter(model, with_projection) -> transformers.PreTrainedModel``
returns a new, standalone text model (weights copied, in eval mode, on the model's device and dtype) such that

- ``encoder(input_ids)[0]`` is the per-token last hidden state, shape (batch, tokens, width): what diffusers'
  `encode_prompt` feeds the UNet (called with `input_ids` only, or also `attention_mask` when
  ``encoder.config.use_attention_mask`` is true);
- ``encoder.config.max_position_embeddings`` is the longest input, in tokens, it was trained for (RoPE models
  store their trained length there too);
- ``encoder.save_pretrained`` / ``from_pretrained`` round-trip it, so that the pipeline saves and reloads. A
  transformers class (as HiMo-CLIP's `CLIPTextModel`) reloads by name from `model_index.json`. Any other class is
  recorded there under its full module path, and diffusers 0.42 resolves that path only from modules the process
  has already imported (it never imports a module a checkpoint names), then looks the loading methods up as
  attributes of that module (`PreTrainedModel` among them). So OneLIP's adapter returns a
  `OneLIPTextModelForDiffusion`, its `OneLIPTextModel` defined in this module, which has that name: a saved
  pipeline records ``["hf_longclip.integrations.diffusion", "OneLIPTextModelForDiffusion"]`` and reloads in any
  process that has imported this module (or pass ``StableDiffusionPipeline.from_pretrained(path,
  text_encoder=OneLIPTextModel.from_pretrained(path, subfolder="text_encoder"))``). Another model's adapter
  returning a class of its own does the same.

HiMo-CLIP and DITM (`CLIPDualEncoder`) give a transformers `CLIPTextModel` with their text config and weights
(exactly their text outputs); OneLIP its RoPE text tower (tests/integrations/test_diffusion_onelip.py). With
``with_projection=True`` the adapter returns the tower with its text projection, whose first output is the projected
end-of-text embedding (transformers' `CLIPTextModelWithProjection`: SDXL's second encoder); models without one raise
ValueError.

Pipelines with two text encoders, and encoders without a long checkpoint
-----------------------------------------------------------------------
`sdxl_text_components` builds both of SDXL's encoders and tokenizers for long prompts; `stretch_clip_text_encoder`
stretches any transformers CLIP text encoder (77 -> 248 positions, Long-CLIP's knowledge-preserved rule, no
fine-tuning: the paper's baseline for OpenCLIP-bigG in SDXL). SD 2.x and Flux take one CLIP encoder, as SD 1.x:
`text_encoder_for_diffusion` or `stretch_clip_text_encoder`, and the tokenizer's `model_max_length` set (docs/
integrations.md).
"""

import copy
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import save
from transformers import CLIPTextModel, CLIPTextModelWithProjection, PreTrainedModel, PreTrainedTokenizerBase
from transformers import initialization as init

from hf_longclip.fileio import write_atomic
from hf_longclip.modeling_common.clip_dual_encoder import CLIPDualEncoder
from hf_longclip.modeling_common.positions import stretch_position_embeddings
from hf_longclip.modeling_common.transformers_compat import nested_text_state_dict
from hf_longclip.models.onelip.modeling_onelip import OneLIPModel, OneLIPTextModel

CLIP_TEXT_POSITIONS = 77


class OneLIPTextModelForDiffusion(OneLIPTextModel):
    """OneLIP's RoPE text tower as a diffusers pipeline holds it: `OneLIPTextModel` itself, defined in this module so
    that a saved pipeline's `model_index.json` names this module, where diffusers finds `PreTrainedModel` (see the
    module docstring). It saves and loads as `OneLIPTextModel` does."""


def _clip_text_encoder(model: CLIPDualEncoder, with_projection: bool) -> CLIPTextModel | CLIPTextModelWithProjection:
    """The text tower alone, as the transformers `CLIPTextModel` a diffusers pipeline takes for `text_encoder`: the
    same text config (all the model's positions), the weights copied (not shared: the pipeline may cast or move it),
    the same outputs; with `with_projection`, a `CLIPTextModelWithProjection` with the text projection too (SDXL's
    `text_encoder_2`: its `text_embeds` are `get_text_features`' `pooler_output`). Built without random
    initialisation, so it leaves torch's random state as it was. (In transformers 5, `model.text_model` is itself a
    `CLIPTextModel`.)"""
    text_config = copy.deepcopy(model.config.text_config)
    text_config.projection_dim = model.config.projection_dim  # its config also describes the single file's projection
    with init.no_init_weights():
        if not with_projection:
            encoder = CLIPTextModel(text_config)
            encoder.load_state_dict(model.text_model.state_dict())
        else:
            encoder = CLIPTextModelWithProjection(text_config)
            encoder.text_model.load_state_dict(model.text_model.state_dict())
            encoder.text_projection.load_state_dict(model.text_projection.state_dict())
    return encoder.to(device=model.device, dtype=model.dtype).eval()


def _onelip_text_encoder(model: OneLIPModel, with_projection: bool) -> OneLIPTextModelForDiffusion:
    """The long text encoder alone (weights copied, eval mode) as a `OneLIPTextModelForDiffusion` (Sec. 4.4):
    `encoder(input_ids)[0]` is its per-token last hidden state. There is no OneLIP text model with its projection
    (SDXL's `text_encoder_2`): `with_projection` raises. Built without random initialisation, so it leaves torch's
    random state as it was; its rotary frequencies are computed from the text config, as the tower's are."""
    if with_projection:
        raise ValueError("OneLIP has no text encoder with projection for diffusers: use it as SDXL's first "
                         "text_encoder, with a CLIP or HiMo-CLIP as text_encoder_2")
    with init.no_init_weights():
        encoder = OneLIPTextModelForDiffusion(copy.deepcopy(model.config.text_config))
    encoder.load_state_dict(model.text_model.state_dict())
    return encoder.to(device=model.device, dtype=model.dtype).eval()


#: model class -> adapter(model, with_projection) returning its text tower for a diffusers pipeline (module docstring)
TEXT_ENCODERS: dict[type, Callable[..., PreTrainedModel]] = {
    CLIPDualEncoder: _clip_text_encoder,
    OneLIPModel: _onelip_text_encoder,
}


def register_text_encoder(model_class: type, adapter: Callable[..., PreTrainedModel]) -> None:
    """Plug `model_class` (and its subclasses) into `text_encoder_for_diffusion`: `adapter(model, with_projection)`
    returns the standalone text model the module docstring describes (raising ValueError for `with_projection=True`
    if the model has no text projection)."""
    TEXT_ENCODERS[model_class] = adapter


def _adapter(model) -> Callable[..., PreTrainedModel] | None:
    """The adapter registered for the nearest class of `model`'s class hierarchy, if any."""
    for cls in type(model).__mro__:
        if cls in TEXT_ENCODERS:
            return TEXT_ENCODERS[cls]
    return None


def text_encoder_for_diffusion(model, with_projection: bool = False) -> tuple[PreTrainedModel, int]:
    """The text encoder a diffusers pipeline takes for `model`'s text tower, and the prompt length in tokens to give
    its tokenizer (`model_max_length`). Dispatches on the model's class (`TEXT_ENCODERS`, see the module docstring);
    a model of no registered class raises TypeError. `with_projection=True` asks for the tower with its text
    projection (SDXL's `text_encoder_2`)."""
    adapter = _adapter(model)
    if adapter is None:
        raise TypeError(
            f"{type(model).__name__} has no text encoder for diffusion: register an adapter for its class with "
            "hf_longclip.integrations.diffusion.register_text_encoder, returning a standalone PreTrainedModel text "
            "tower (see that module's docstring)"
        )
    encoder = adapter(model, with_projection)
    if not isinstance(encoder, PreTrainedModel):
        raise TypeError(f"the diffusion adapter of {type(model).__name__} must return a transformers "
                        f"PreTrainedModel, got {type(encoder).__name__}")
    max_length = getattr(encoder.config, "max_position_embeddings", None)
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"the text encoder of {type(model).__name__} must name its length in tokens in "
                         f"`config.max_position_embeddings` (an int >= 2), got {max_length!r}")
    return encoder, max_length


def save_text_encoder(model, processor, output_dir: str | Path) -> Path:
    """Write `model`'s text tower alone to `output_dir`, as the plain transformers text model of
    `text_encoder_for_diffusion` (a `CLIPTextModel` with all the model's positions for HiMo-CLIP, which diffusers loads
    without our code), and the processor's tokenizer beside it with `model_max_length` set to the tower's length
    (`hf-longclip convert --text-encoder-only`)."""
    output_dir = Path(output_dir)
    encoder, max_length = text_encoder_for_diffusion(model)
    encoder.save_pretrained(output_dir)
    if isinstance(encoder, CLIPTextModel):  # the names every transformers release loads, 4.57 included
        weights = output_dir / "model.safetensors"
        state = nested_text_state_dict({k: v.contiguous() for k, v in encoder.state_dict().items()})
        write_atomic(weights, save(state, metadata={"format": "pt"}))
    if processor is not None:
        processor.tokenizer.model_max_length = max_length
        processor.tokenizer.save_pretrained(output_dir)
    return output_dir


def single_file_text_encoder(model) -> dict:
    """`model`'s CLIP text tower with its projection as one state dict in the layout image-generation tools load a
    standalone text encoder from (ComfyUI's CLIPLoader / DualCLIPLoader, Forge, kohya, OneTrainer):
    transformers' `CLIPTextModelWithProjection` names, `text_model.*` and `text_projection.weight`. Its width says
    CLIP-L (768) or CLIP-G / bigG (1280, SDXL's second encoder), its position table (`text_model.embeddings.
    position_embedding.weight`, 248 rows for HiMo-CLIP and Long-CLIP) that it is a long one (ComfyUI picks its
    Long-CLIP text model by those 248 rows). HiMo-CLIP, Long-CLIP and DITM have such a tower; OneLIP's rotary one has
    no such layout (TypeError)."""
    if not isinstance(model, CLIPDualEncoder):
        raise TypeError(f"a single-file text encoder is a CLIP text tower (HiMo-CLIP, Long-CLIP, DITM); "
                        f"{type(model).__name__}'s is not: write its text encoder folder (--text-encoder-only), which "
                        f"carries its code")
    encoder = _clip_text_encoder(model, with_projection=True)
    return nested_text_state_dict({key: value.contiguous() for key, value in encoder.state_dict().items()
                                   if not key.endswith("position_ids")})


def save_single_file_text_encoder(model, path: str | Path) -> Path:
    """Write `single_file_text_encoder(model)` to the `.safetensors` file `path` (`hf-longclip convert
    --single-file`, `hf-longclip export-clip --single-file`)."""
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"the single-file text encoder is a .safetensors file, got {path}")
    state = single_file_text_encoder(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, save(state, metadata={"format": "pt"}))
    return path


def stretch_clip_text_encoder(encoder: CLIPTextModel | CLIPTextModelWithProjection):
    """A copy of a transformers CLIP text encoder (with or without projection) whose position table is stretched by
    Long-CLIP's knowledge-preserved rule (keep the first 20 rows, interpolate the rest 4x: 77 -> 248 positions), every
    other weight unchanged: Long-CLIP's "no fine-tuning" long-text baseline (its SDXL recipe for OpenCLIP-bigG)."""
    if not isinstance(encoder, (CLIPTextModel, CLIPTextModelWithProjection)):
        raise TypeError(f"stretch_clip_text_encoder takes a transformers CLIPTextModel or CLIPTextModelWithProjection, "
                        f"got {type(encoder).__name__}")
    state = encoder.state_dict()
    key = next(name for name in state if name.endswith("embeddings.position_embedding.weight"))
    state[key] = stretch_position_embeddings(state[key])
    config = copy.deepcopy(encoder.config)
    config.max_position_embeddings = state[key].shape[0]
    with init.no_init_weights():
        stretched = type(encoder)(config)
    stretched.load_state_dict(state, strict=False)  # position_ids buffers are rebuilt at the new length
    return stretched.to(device=encoder.device, dtype=encoder.dtype).eval()


def _long_clip_text_encoder(encoder, with_projection: bool) -> PreTrainedModel:
    """One of our models -> its adapter's encoder; a transformers CLIP text encoder -> as is when already longer than
    CLIP's 77 positions (a converted Long-CLIP), else stretched."""
    if _adapter(encoder) is not None:
        return text_encoder_for_diffusion(encoder, with_projection=with_projection)[0]
    expected = CLIPTextModelWithProjection if with_projection else CLIPTextModel
    if not isinstance(encoder, expected):
        raise TypeError(f"expected one of hf_longclip's models or a transformers {expected.__name__}, "
                        f"got {type(encoder).__name__}")
    if encoder.config.max_position_embeddings > CLIP_TEXT_POSITIONS:
        return encoder
    return stretch_clip_text_encoder(encoder)


def sdxl_text_components(
    text_encoder, text_encoder_2, tokenizer: PreTrainedTokenizerBase, tokenizer_2: PreTrainedTokenizerBase
) -> dict:
    """SDXL's two text encoders and tokenizers for long prompts, as keyword arguments of
    `StableDiffusionXLPipeline` / `StableDiffusionXLImg2ImgPipeline` (their constructors or `from_pretrained`).

    `text_encoder`: one of our models (its text tower, `text_encoder_for_diffusion(model)`) or a transformers
    `CLIPTextModel`; `text_encoder_2`: one of ours with a text projection (`text_encoder_for_diffusion(model,
    with_projection=True)`) or a transformers `CLIPTextModelWithProjection` (e.g. OpenCLIP-bigG). A transformers encoder
    of at most CLIP's 77 positions is stretched (`stretch_clip_text_encoder`). SDXL concatenates both encoders'
    penultimate hidden states token by token, so both must take the same length; copies of the tokenizers get it as
    `model_max_length`. The pooled embedding SDXL conditions on is `text_encoder_2`'s projected end-of-text
    embedding."""
    first = _long_clip_text_encoder(text_encoder, with_projection=False)
    second = _long_clip_text_encoder(text_encoder_2, with_projection=True)
    lengths = first.config.max_position_embeddings, second.config.max_position_embeddings
    if lengths[0] != lengths[1]:
        raise ValueError(f"SDXL joins its two encoders' hidden states token by token: they must take the same number "
                         f"of tokens, got {lengths[0]} (text_encoder) and {lengths[1]} (text_encoder_2)")
    tokenizers = copy.deepcopy(tokenizer), copy.deepcopy(tokenizer_2)
    for copied in tokenizers:
        copied.model_max_length = lengths[0]
    return dict(text_encoder=first, text_encoder_2=second, tokenizer=tokenizers[0], tokenizer_2=tokenizers[1])


__all__ = ["TEXT_ENCODERS", "OneLIPTextModelForDiffusion", "register_text_encoder", "save_text_encoder",
           "sdxl_text_components", "stretch_clip_text_encoder", "text_encoder_for_diffusion"]
