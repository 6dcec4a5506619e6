"""DITM (Jang et al., "Descriptive Image-Text Matching with Graded Contextual Similarity"): CLIP's towers with a
generalized pooling operator (GPO) over the image tokens and L2-normalised embeddings (Sec. IV-C.1), trained with
the adaptive triplet + ordering objective of `hf_longclip.objectives.ditm` (Eq. 7) by
`hf_longclip.recipes.ditm.task.DITMTask`."""

import math

import torch
from torch import nn
from transformers import CLIPModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from hf_longclip.modeling_common.clip_dual_encoder import CLIPDualEncoder
from hf_longclip.modeling_common.dual_encoder import check_pixel_values
from hf_longclip.modeling_common.gpo import GPO
from hf_longclip.modeling_common.transformer import returns_tuple_when_asked
from hf_longclip.modeling_common.transformers_compat import init, no_init_weights, tower_outputs

from .configuration_ditm import DITMConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-base-patch16"


class DITMModel(CLIPDualEncoder):
    """
    CLIP whose image embedding is GPO over the projected tokens of the vision tower (Sec. IV-C.1).
    `forward(return_loss=True)` returns CLIP's InfoNCE over the given local batch; DITM's objective (Eq. 7) is
    `DITMTask`'s.

    Image embedding (a choice; the paper says "GPO atop a ViT"): every output token of the vision transformer, the
    class token included, goes through CLIP's post-layernorm and visual projection, and GPO pools the projected
    tokens, so the GPO output lives in CLIP's joint space from the first step. The text embedding is CLIP's
    (end-of-text token, projected). Both are L2-normalised in `forward`; DITM scores pairs by cosine similarity
    with no temperature, so the logit scale (kept for `logits_per_image`, e.g. the zero-shot pipeline) is frozen.

    Args:
        config ([`DITMConfig`]): the model's configuration.
    """

    config: DITMConfig
    config_class = DITMConfig
    new_weight_prefixes = ("image_pooler.",)

    def __init__(self, config: DITMConfig):
        super().__init__(config)
        with no_init_weights():  # GPO comes after CLIP's `post_init`: `_init_weights` draws it, in its order
            self.image_pooler = GPO(config.gpo_pe_dim, config.gpo_hidden_dim, config.gpo_temperature)
        self.logit_scale.requires_grad_(False)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        """CLIP's initialisation; GPO's GRU and scoring layer get torch's defaults, as VSE-infinity's GPO has them."""
        if isinstance(module, nn.GRU):
            bound = 1 / math.sqrt(module.hidden_size)
            for param in module.parameters():
                init.uniform_(param, -bound, bound)
        elif "image_pooler" in self._modules and module is self.image_pooler.linear:  # (not yet in CLIP's post_init)
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
        else:
            super()._init_weights(module)

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, stretch_positions: bool = False,
        trust_remote_code: bool = False, **config_kwargs,
    ) -> "DITMModel":
        """Build a DITM model from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`; the
        checkpoint's own code runs only with `trust_remote_code=True`): CLIP's
        towers, a randomly initialised GPO (Sec. IV-C.2). `stretch_positions=True` stretches the text positions
        77 -> 248 (Long-CLIP) for long captions; `config_kwargs` set configuration options (GPO's)."""
        return super().from_clip(clip, stretch_positions, trust_remote_code, **config_kwargs)

    @returns_tuple_when_asked
    def get_image_features(
        self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False, **kwargs
    ) -> BaseModelOutputWithPooling:
        r"""
        The vision tower's outputs, with `pooler_output` the GPO pooling of its projected tokens (not normalised, as
        CLIP's `get_image_features`).

        Args:
            pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, height, width)`):
                The images, as the model's processor normalises them.
            interpolate_pos_encoding (`bool`, *optional*, defaults to `False`):
                Whether to interpolate the pre-trained position encodings (images of another size).

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`] (a tuple with `return_dict=False`).
        """
        check_pixel_values(pixel_values)
        vision_outputs = tower_outputs(self.vision_model, pixel_values=pixel_values,
                                       interpolate_pos_encoding=interpolate_pos_encoding, **kwargs)
        tokens = self.visual_projection(self.vision_model.post_layernorm(vision_outputs.last_hidden_state))
        vision_outputs.pooler_output = self.image_pooler(tokens)[0]
        return vision_outputs


__all__ = ["DITMModel"]
