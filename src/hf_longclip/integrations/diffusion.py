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

The hook a model implements to plug in
--------------------------------------
A model class defines ``diffusion_text_encoder(self) -> transformers.PreTrainedModel``, returning a new, standalone
text model (weights copied, in eval mode, on the model's device and dtype) such that

- ``encoder(input_ids)[0]`` is the per-token last hidden state, shape (batch, tokens, width): what diffusers'
  `encode_prompt` feeds the UNet (called with `input_ids` only, or also `attention_mask` when
  ``encoder.config.use_attention_mask`` is true);
- ``encoder.config.max_position_embeddings`` is the longest input, in tokens, it was trained for (RoPE models
  store their trained length there too);
- ``encoder.save_pretrained`` / ``from_pretrained`` round-trip it, so that the pipeline saves and reloads. A
  transformers class (as HiMo-CLIP's `CLIPTextModel`) reloads by name from `model_index.json`. Any other class is
  recorded there under its full module path, and diffusers 0.42 resolves that path only from modules the process
  has already imported (it never imports a module a checkpoint names): import the class's module first, or pass
  ``StableDiffusionPipeline.from_pretrained(path, text_encoder=YourTextModel.from_pretrained(path, subfolder=
  "text_encoder"))``. It then looks the loading methods up as attributes of that module (`PreTrainedModel`
  among them), so the module must have a `PreTrainedModel` name (OneLIP's modeling module re-exports it).

HiMo-CLIP returns a transformers `CLIPTextModel` with its text config and weights (exactly its text outputs); OneLIP
its RoPE `OneLIPTextModel` (tests/models/onelip/test_diffusion_onelip.py). With ``with_projection=True`` the hook returns the tower
with its text projection, whose first output is the projected end-of-text embedding (transformers'
`CLIPTextModelWithProjection`: SDXL's second encoder); models without one raise ValueError.

Pipelines with two text encoders, and encoders without a long checkpoint
-----------------------------------------------------------------------
`sdxl_text_components` builds both of SDXL's encoders and tokenizers for long prompts; `stretch_clip_text_encoder`
stretches any transformers CLIP text encoder (77 -> 248 positions, Long-CLIP's knowledge-preserved rule, no
fine-tuning: the paper's baseline for OpenCLIP-bigG in SDXL). SD 2.x and Flux take one CLIP encoder, as SD 1.x:
`text_encoder_for_diffusion` or `stretch_clip_text_encoder`, and the tokenizer's `model_max_length` set (docs/
integrations.md).
"""

import copy
from pathlib import Path

from transformers import CLIPTextModel, CLIPTextModelWithProjection, PreTrainedModel, PreTrainedTokenizerBase
from transformers import initialization as init

from hf_longclip.modeling_common.positions import stretch_position_embeddings

HOOK = "diffusion_text_encoder"
CLIP_TEXT_POSITIONS = 77


def text_encoder_for_diffusion(model, with_projection: bool = False) -> tuple[PreTrainedModel, int]:
    """The text encoder a diffusers pipeline takes for `model`'s text tower, and the prompt length in tokens to give
    its tokenizer (`model_max_length`). Dispatches on the model's `diffusion_text_encoder()` hook (see the module
    docstring); a model without it raises TypeError. `with_projection=True` asks for the tower with its text
    projection (SDXL's `text_encoder_2`)."""
    hook = getattr(model, HOOK, None)
    if not callable(hook):
        raise TypeError(
            f"{type(model).__name__} has no text encoder for diffusion: its class must define `{HOOK}(self)`, "
            "returning a standalone PreTrainedModel text tower (see hf_longclip.integrations.diffusion)"
        )
    encoder = hook(with_projection=True) if with_projection else hook()
    if not isinstance(encoder, PreTrainedModel):
        raise TypeError(f"{type(model).__name__}.{HOOK}() must return a transformers PreTrainedModel, "
                        f"got {type(encoder).__name__}")
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
    if processor is not None:
        processor.tokenizer.model_max_length = max_length
        processor.tokenizer.save_pretrained(output_dir)
    return output_dir


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
    """One of our models -> its hook's encoder; a transformers CLIP text encoder -> as is when already longer than
    CLIP's 77 positions (a converted Long-CLIP), else stretched."""
    if callable(getattr(encoder, HOOK, None)):
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

    `text_encoder`: one of our models (its text tower, `diffusion_text_encoder()`) or a transformers `CLIPTextModel`;
    `text_encoder_2`: one of ours with a text projection (`diffusion_text_encoder(with_projection=True)`) or a
    transformers `CLIPTextModelWithProjection` (e.g. OpenCLIP-bigG). A transformers encoder of at most CLIP's 77
    positions is stretched (`stretch_clip_text_encoder`). SDXL concatenates both encoders' penultimate hidden states
    token by token, so both must take the same length; copies of the tokenizers get it as `model_max_length`. The
    pooled embedding SDXL conditions on is `text_encoder_2`'s projected end-of-text embedding."""
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


__all__ = ["save_text_encoder", "sdxl_text_components", "stretch_clip_text_encoder", "text_encoder_for_diffusion"]
