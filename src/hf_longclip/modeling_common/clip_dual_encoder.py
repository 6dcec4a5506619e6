"""What the models built on transformers' `CLIPModel` share (HiMo-CLIP, DITM): construction from a CLIP checkpoint,
the end-of-text check (`end_of_text_positions`) and a shape-(1,) logit scale (the feature functions and the joint
forward pass are `DualEncoderMixin`'s). DITM adds its image pooling."""

import torch
from torch import nn
from transformers import CLIPModel
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.utils import logging

from hf_longclip.modeling_common.dual_encoder import (
    DualEncoderMixin,
    check_input_ids,
    end_of_text_positions,
    load_clip_model,
)
from hf_longclip.modeling_common.initialization import InitializesEveryModuleMixin
from hf_longclip.modeling_common.positions import stretch_position_embeddings
from hf_longclip.modeling_common.transformers_compat import init

logger = logging.get_logger(__name__)


class CLIPDualEncoder(InitializesEveryModuleMixin, DualEncoderMixin, CLIPModel):
    """A `CLIPModel` that saves its own code, checks its texts' end-of-text tokens and starts from CLIP checkpoints.

    The logit scale is a shape-(1,) parameter (DeepSpeed rejects 0-dim parameters), initialised by `_init_weights`
    (CLIP's leaves it out). `new_weight_prefixes` names the weights a subclass adds that CLIP checkpoints lack
    (randomly initialised by `from_clip`).
    """

    new_weight_prefixes: tuple[str, ...] = ()

    def __init__(self, config):
        super().__init__(config)
        self.logit_scale = nn.Parameter(torch.tensor([config.logit_scale_init_value]))

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, CLIPDualEncoder):  # CLIP's `_init_weights` leaves the logit scale out
            init.constant_(module.logit_scale, self.config.logit_scale_init_value)

    @classmethod
    def from_clip(cls, clip: "str | CLIPModel", stretch_positions: bool = True, trust_remote_code: bool = False,
                  **config_kwargs):
        """Build the model from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`; code the
        checkpoint ships runs only with `trust_remote_code=True`: see `load_clip_model`).

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (CLIP's 77 positions); `config_kwargs` set the model's own options. Weights under
        `new_weight_prefixes` start from the model's initialisation; any other weight must come from the checkpoint.
        """
        clip = load_clip_model(clip, trust_remote_code)
        state = clip.state_dict()
        key = "text_model.embeddings.position_embedding.weight"
        if stretch_positions:
            state[key] = stretch_position_embeddings(state[key])
        state["logit_scale"] = state["logit_scale"].reshape(1)
        text_config = clip.config.text_config.to_dict()
        text_config["max_position_embeddings"] = state[key].shape[0]
        config = cls.config_class(
            text_config=text_config,
            vision_config=clip.config.vision_config.to_dict(),
            projection_dim=clip.config.projection_dim,
            logit_scale_init_value=clip.config.logit_scale_init_value,
            **config_kwargs,
        )
        model = cls(config)
        model.load_state_dict(state, strict=False)
        missing = [name for name in set(model.state_dict()) - set(state)
                   if not name.endswith("position_ids") and not name.startswith(cls.new_weight_prefixes)]
        if missing:
            raise ValueError(f"weights missing from the CLIP checkpoint: {sorted(missing)}")
        if cls.new_weight_prefixes:
            new = ", ".join(prefix.rstrip(".") for prefix in cls.new_weight_prefixes)
            logger.warning(f"{cls.__name__}.from_clip: {new} not in CLIP, at their initialisation (`_init_weights`)")
        return model.to(clip.dtype)

    def get_text_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        CLIP's `get_text_features` after checking the token ids (`check_input_ids`) and that every text has its
        end-of-text token, where CLIP pools: the text tower's outputs, with `pooler_output` the projected
        end-of-text embedding.

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
        check_input_ids(input_ids, self.config.text_config.vocab_size)
        end_of_text_positions(input_ids, self.config.text_config.eos_token_id)  # the check: CLIP pools there
        return super().get_text_features(input_ids, attention_mask, position_ids, **kwargs)
