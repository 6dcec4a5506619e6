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
its RoPE `OneLIPTextModel` (tests/models/onelip/test_diffusion_onelip.py).
"""

from transformers import PreTrainedModel

HOOK = "diffusion_text_encoder"


def text_encoder_for_diffusion(model) -> tuple[PreTrainedModel, int]:
    """The text encoder a diffusers pipeline takes for `model`'s text tower, and the prompt length in tokens to give
    its tokenizer (`model_max_length`). Dispatches on the model's `diffusion_text_encoder()` hook (see the module
    docstring); a model without it raises TypeError."""
    hook = getattr(model, HOOK, None)
    if not callable(hook):
        raise TypeError(
            f"{type(model).__name__} has no text encoder for diffusion: its class must define `{HOOK}(self)`, "
            "returning a standalone PreTrainedModel text tower (see hf_longclip.diffusion)"
        )
    encoder = hook()
    if not isinstance(encoder, PreTrainedModel):
        raise TypeError(f"{type(model).__name__}.{HOOK}() must return a transformers PreTrainedModel, "
                        f"got {type(encoder).__name__}")
    max_length = getattr(encoder.config, "max_position_embeddings", None)
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"the text encoder of {type(model).__name__} must name its length in tokens in "
                         f"`config.max_position_embeddings` (an int >= 2), got {max_length!r}")
    return encoder, max_length


__all__ = ["text_encoder_for_diffusion"]
