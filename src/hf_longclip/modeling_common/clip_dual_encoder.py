"""What the models built on transformers' `CLIPModel` share (HiMo-CLIP, DITM): construction from a CLIP checkpoint,
the end-of-text check (`end_of_text_positions`) and a shape-(1,) logit scale (the feature functions and the joint
forward pass are `DualEncoderMixin`'s). DITM adds its image pooling."""

import torch
from torch import nn
from transformers import CLIPModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from hf_longclip.modeling_common.dual_encoder import (
    DualEncoderMixin,
    check_input_ids,
    end_of_text_positions,
    load_clip_model,
    model_from_clip,
)
from hf_longclip.modeling_common.initialization import InitializesEveryModuleMixin
from hf_longclip.modeling_common.transformers_compat import init


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
        checkpoint ships runs only with `trust_remote_code=True`: see `load_clip_model`), with `model_from_clip`.

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (CLIP's 77 positions); `config_kwargs` set the model's own options. Weights under
        `new_weight_prefixes` start from the model's initialisation; any other weight must come from the checkpoint.
        """
        return model_from_clip(cls, load_clip_model(clip, trust_remote_code),
                               "stretch" if stretch_positions else "keep", **config_kwargs)

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
