"""What every dual-encoder model of the library shares: its output type, its saving behaviour, CLIP's feature
functions and joint forward pass, where it pools a text, the checks of its inputs (`check_input_ids`,
`check_pixel_values`: free, no host synchronisation), how a CLIP to start from is loaded (`load_clip_model`) and a model
built from its weights (`model_from_clip`)."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AutoModel, CLIPModel
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.models.clip.modeling_clip import CLIPOutput
from transformers.utils import logging

from hf_longclip.modeling_common.positions import stretch_position_embeddings
from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.transformer import is_tracing, returns_tuple_when_asked
from hf_longclip.modeling_common.transformers_compat import clip_loss, tower_outputs

logger = logging.get_logger(__name__)
POSITION_TABLE = "text_model.embeddings.position_embedding.weight"  # CLIP's text position table
POSITION_TABLE_USES = ("keep", "stretch", "drop")


@dataclass
class DualEncoderOutput(CLIPOutput):
    r"""
    [`CLIPOutput`] plus the scale (and bias) of its logits, as open_clip's models return them, so that a training
    objective reads everything it needs from the output.

    loss (`torch.FloatTensor` of shape `(1,)`, *optional*, returned when `return_loss` is `True`):
        The model's loss over the given local batch alone (each model's docstring says which); training objectives
        over the global batch are `hf_longclip.objectives`, applied by the model's task.
    logit_scale (`torch.FloatTensor` of shape `(1,)`):
        The exponentiated learned temperature the logits are scaled by.
    logit_bias (`torch.FloatTensor` of shape `(1,)`, *optional*):
        The learned bias added to the logits (sigmoid-loss models).
    """

    logit_scale: torch.FloatTensor | None = None
    logit_bias: torch.FloatTensor | None = None


def pairwise_sigmoid_loss(logits_per_image: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023, Eq. 1; F-CAST Eq. 8) of scaled and biased logits, local
    images x texts: -sum over pairs of log sigmoid(z_ij logit_ij) / local images, z_ij = 1 for the matching pair
    (image i, text offset + i) and -1 otherwise. F-CAST's `forward(return_loss=True)` and the training objectives'
    `sigmoid_loss` over the gathered texts both compute it here."""
    signs = -torch.ones_like(logits_per_image)
    rows = torch.arange(logits_per_image.shape[0], device=logits_per_image.device)
    signs[rows, rows + offset] = 1.0
    return -F.logsigmoid(signs * logits_per_image).sum() / logits_per_image.shape[0]


def load_clip_model(clip: "str | CLIPModel", trust_remote_code: bool = False, **kwargs) -> CLIPModel:
    """`clip` itself if it is a `CLIPModel`, else the `CLIPModel` (transformers' or a subclass, such as the library's
    models) that `AutoModel.from_pretrained(clip, **kwargs)` loads from that Hub id or directory. Code shipped with
    the checkpoint runs only with `trust_remote_code=True`: without it, transformers' classes and those registered in
    this process (`import hf_longclip` registers the library's) load, and a checkpoint needing its own code is
    refused."""
    if isinstance(clip, CLIPModel):
        return clip
    model = AutoModel.from_pretrained(clip, trust_remote_code=trust_remote_code, **kwargs)
    if not isinstance(model, CLIPModel):
        raise ValueError(f"{clip} holds a {type(model).__name__}, not a CLIPModel")
    return model


def model_from_clip(cls, clip: CLIPModel, positions: str = "keep", text_options: dict | None = None,
                    **config_kwargs):
    """A `cls` model built from the weights of `clip` (a loaded `CLIPModel`: `load_clip_model`), every `from_clip`'s
    body. Its configuration takes CLIP's text and vision configurations, projection width and logit scale, updated
    with `text_options` (the text configuration's) and `config_kwargs` (the model's own options).

    CLIP's text position table is kept (`positions="keep"`), stretched with Long-CLIP's knowledge-preserved scheme,
    77 -> 248 (`"stretch"`), or dropped (`"drop"`: a model without one, e.g. OneLIP's rotary positions); a kept table
    sets the text configuration's `max_position_embeddings`. The logit scale becomes shape (1,). The weights are
    loaded into `cls`'s base model (`base_model_prefix`: OneLIP's under its pre-training head). Weights under
    `cls.new_weight_prefixes`, which CLIP lacks, start from the model's initialisation, named in a warning; any other
    weight CLIP lacks, or a CLIP weight the model has no place for, is a ValueError."""
    if positions not in POSITION_TABLE_USES:
        raise ValueError(f"positions must be one of {POSITION_TABLE_USES}, got {positions!r}")
    state = clip.state_dict()
    text_config = clip.config.text_config.to_dict()
    table = state.pop(POSITION_TABLE)
    if positions != "drop":
        state[POSITION_TABLE] = stretch_position_embeddings(table) if positions == "stretch" else table
        text_config["max_position_embeddings"] = state[POSITION_TABLE].shape[0]
    text_config.update(text_options or {})
    state["logit_scale"] = state["logit_scale"].reshape(1)
    config = cls.config_class(
        text_config=text_config,
        vision_config=clip.config.vision_config.to_dict(),
        projection_dim=clip.config.projection_dim,
        logit_scale_init_value=clip.config.logit_scale_init_value,
        **config_kwargs,
    )
    model = cls(config)
    prefix = "" if model.base_model is model else f"{cls.base_model_prefix}."
    missing, unexpected = model.load_state_dict({prefix + name: value for name, value in state.items()}, strict=False)
    new = sorted({name.split(".")[0] for name in missing if name.startswith(cls.new_weight_prefixes)})
    missing = [name for name in missing if not name.startswith(cls.new_weight_prefixes)]
    if missing or unexpected:
        raise ValueError(f"CLIP checkpoint does not match {cls.__name__}: missing {sorted(missing)}, unexpected "
                         f"{sorted(unexpected)}")
    if new:
        logger.warning(f"{cls.__name__}.from_clip: {', '.join(new)} not in CLIP, at their initialisation "
                       "(`_init_weights`)")
    return model.to(clip.dtype)


class DualEncoderMixin(CodeBundleMixin):
    """What a dual-encoder model adds to a `PreTrainedModel`: its code bundle saved next to the weights, with a
    `config.json` that also maps `AutoModelForZeroShotImageClassification` to the class (so that
    `pipeline("zero-shot-image-classification", model=path, trust_remote_code=True)` works); CLIP's feature functions
    (`get_text_features`, `get_image_features`, over the model's `text_model` / `text_projection` and `vision_model` /
    `visual_projection`); and the joint forward pass (`forward`; F-CAST's takes superpixels too) and what it is made
    of: `encode_pair` (both towers through the model's `get_image_features` / `get_text_features`, L2-normalised),
    `pair_output` (logits scaled by the model's `logit_scale`, biased by its `logit_bias` if any) and `pair_loss`
    (the local loss of `return_loss=True`)."""

    def _auto_classes_also_loading(self) -> dict[str, type]:
        return {**super()._auto_classes_also_loading(), "AutoModelForZeroShotImageClassification": type(self)}

    @returns_tuple_when_asked
    def get_text_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        CLIP's `get_text_features`: the text tower's outputs, with `pooler_output` the projected end-of-text
        embedding (no image).

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, as the model's processor gives them.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Position of each token (defaults to 0, 1, ...).

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`] (a tuple with `return_dict=False`).
        """
        outputs = tower_outputs(self.text_model, input_ids=input_ids, attention_mask=attention_mask,
                                position_ids=position_ids, **kwargs)
        outputs.pooler_output = self.text_projection(outputs.pooler_output)
        return outputs

    @returns_tuple_when_asked
    def get_image_features(
        self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False, **kwargs
    ) -> BaseModelOutputWithPooling:
        r"""
        CLIP's `get_image_features` after `check_pixel_values`: the vision tower's outputs, with `pooler_output` the
        projected [CLS] embedding.

        Args:
            pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, height, width)`):
                The images, as the model's processor normalises them.
            interpolate_pos_encoding (`bool`, *optional*, defaults to `False`):
                Whether to interpolate the pre-trained position encodings (images of another size).

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`] (a tuple with `return_dict=False`).
        """
        check_pixel_values(pixel_values)
        outputs = tower_outputs(self.vision_model, pixel_values=pixel_values,
                                interpolate_pos_encoding=interpolate_pos_encoding, **kwargs)
        outputs.pooler_output = self.visual_projection(outputs.pooler_output)
        return outputs

    @returns_tuple_when_asked
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        return_loss: bool | None = None,
        interpolate_pos_encoding: bool = False,
        **kwargs,
    ) -> DualEncoderOutput:
        r"""
        Both towers on a batch of texts and images: their embeddings, L2-normalised, and CLIP's scaled cosine logits.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, as the model's processor gives them (each text with its end-of-text token).
            pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, height, width)`):
                The images, as the model's processor normalises them.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Position of each token (defaults to 0, 1, ...).
            return_loss (`bool`, *optional*):
                Whether to return CLIP's symmetric InfoNCE over this batch (text i matching image i, no gather).
            interpolate_pos_encoding (`bool`, *optional*, defaults to `False`):
                Whether to interpolate the vision tower's pre-trained position encodings (images of another size).

        Returns:
            [`DualEncoderOutput`] (a tuple with `return_dict=False`).
        """
        vision_outputs, text_outputs, image_embeds, text_embeds = self.encode_pair(
            input_ids, pixel_values, attention_mask, position_ids,
            {"interpolate_pos_encoding": interpolate_pos_encoding}, **kwargs
        )
        return self.pair_output(vision_outputs, text_outputs, image_embeds, text_embeds, return_loss)

    def encode_pair(self, input_ids, pixel_values, attention_mask=None, position_ids=None,
                    image_inputs: dict | None = None, **kwargs):
        """Both towers on a non-empty batch: (vision outputs, text outputs, L2-normalised image embeds,
        L2-normalised text embeds). `image_inputs` are the image tower's own inputs besides the pixels
        (`interpolate_pos_encoding`, F-CAST's `superpixels`); `kwargs` go to both towers."""
        if input_ids.shape[0] == 0 or pixel_values.shape[0] == 0:
            raise ValueError("the batch is empty: pass at least one text and one image (a non-empty batch)")
        vision_outputs = self.get_image_features(
            pixel_values=pixel_values, **(image_inputs or {}), return_dict=True, **kwargs
        )
        text_outputs = self.get_text_features(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, return_dict=True, **kwargs
        )
        image_embeds = F.normalize(vision_outputs.pooler_output, dim=-1)
        text_embeds = F.normalize(text_outputs.pooler_output, dim=-1)
        return vision_outputs, text_outputs, image_embeds, text_embeds

    def pair_output(self, vision_outputs, text_outputs, image_embeds, text_embeds, return_loss=False):
        """The logits (cosine similarity times the model's `logit_scale`, plus its `logit_bias` where it has one:
        F-CAST's) and every output; with `return_loss`, `pair_loss` of the logits."""
        logit_scale = self.logit_scale.exp()
        logits_per_text = logit_scale * text_embeds @ image_embeds.T
        logit_bias = getattr(self, "logit_bias", None)
        if logit_bias is not None:
            logits_per_text = logits_per_text + logit_bias
            logit_bias = logit_bias.clone()  # a copy: ZeRO-3 may release the parameter after forward
        return DualEncoderOutput(
            loss=self.pair_loss(logits_per_text) if return_loss else None,
            logit_scale=logit_scale,
            logit_bias=logit_bias,
            logits_per_image=logits_per_text.T,
            logits_per_text=logits_per_text,
            text_embeds=text_embeds,
            image_embeds=image_embeds,
            text_model_output=text_outputs,
            vision_model_output=vision_outputs,
        )

    def pair_loss(self, logits_per_text: torch.Tensor) -> torch.Tensor:
        """The loss `forward(return_loss=True)` returns: CLIP's symmetric InfoNCE over the local batch, text i
        matching image i, transformers' own (`transformers_compat.clip_loss`: no gather across processes, training
        objectives are `hf_longclip.objectives`)."""
        return clip_loss(logits_per_text)


def check_input_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """Token ids must be integers, in a non-empty batch, within the vocabulary [0, `vocab_size`). The range is
    checked without a host synchronisation: on an accelerator by an asynchronous device assertion (as CAST checks its
    superpixel ids), on the CPU as a ValueError naming the id; not at all while tracing or compiling."""
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, got {input_ids.dtype}")
    if input_ids.numel() == 0:
        raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}): pass at least one text")
    if is_tracing(input_ids):
        return
    in_range = (input_ids.min() >= 0) & (input_ids.max() < vocab_size)
    message = f"token ids must lie in the vocabulary [0, {vocab_size}): tokenize with the model's own processor"
    if input_ids.device.type != "cpu":
        torch._assert_async(in_range, message)
    elif not in_range:
        bad = input_ids[(input_ids < 0) | (input_ids >= vocab_size)]
        raise ValueError(f"{message} (got id {int(bad[0])})")


def check_pixel_values(pixel_values: torch.Tensor) -> None:
    """Pixels must be floating point (the processor's normalised values; raw uint8 pixels would be read as
    intensities of up to 255 standard deviations) in a non-empty batch. Dtype and shape only: looking for NaN would
    read every pixel at every step, so NaN is refused where images enter, by the processors
    (`modeling_common.images`), and NaN pixels passed to a model directly give NaN embeddings."""
    if not pixel_values.is_floating_point():
        raise TypeError(f"pixel_values must be floating point, normalised by the model's processor; got "
                        f"{pixel_values.dtype} (raw pixels? pass the images through the processor)")
    if pixel_values.numel() == 0:
        raise ValueError(f"pixel_values is empty (shape {tuple(pixel_values.shape)}): pass at least one image")


def check_on_device(condition: torch.Tensor, message: str) -> None:
    """Raise `ValueError(message)` unless the 0-dim bool tensor `condition` holds, without a host synchronisation:
    on the CPU in eager mode the check is immediate (the host holds the value); on an accelerator, and inside a
    compiled graph, it is an asynchronous device assertion (`torch._assert_async`), which fails with `message` (as
    a RuntimeError) when the device next synchronises. No graph break, no per-step wait."""
    if condition.device.type == "cpu" and not is_tracing(condition):
        if not condition:
            raise ValueError(message)
    else:
        torch._assert_async(condition, message)


def end_of_text_positions(input_ids: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """Where CLIP pools each text: its first end-of-text token (with CLIP's legacy `eos_token_id == 2`, its largest
    id, as transformers does). A text without the end-of-text token is a ValueError on the CPU, an asynchronous
    device assertion on an accelerator (`check_on_device`: no host synchronisation); not checked while tracing
    (torch.export and ONNX export keep no assertion)."""
    if eos_token_id == 2:
        return input_ids.to(torch.int).argmax(dim=-1)
    is_end = input_ids == eos_token_id
    if not is_tracing(input_ids):
        check_on_device(
            is_end.any(dim=-1).all(),
            f"every text must contain the end-of-text token (id {eos_token_id}): CLIP pools its embedding there. "
            "Tokenize with the model's processor, which keeps it when truncating.",
        )
    return is_end.int().argmax(dim=-1)
