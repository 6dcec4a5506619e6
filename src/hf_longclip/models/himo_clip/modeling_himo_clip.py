"""HiMo-CLIP (Wu et al., "Modeling Semantic Hierarchy and Monotonicity in Vision-Language Alignment", AAAI 2026).

A CLIP with 248 text positions trained with MoLo = global InfoNCE + lambda * InfoNCE against HiDe components
(in-batch PCA of the text embeddings; `hf_longclip.objectives.molo`). Inference is plain CLIP cosine similarity.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CLIPModel
from transformers import initialization as init
from transformers.utils import can_return_tuple, is_tracing

from hf_longclip.modeling_common.dual_encoder import DualEncoderMixin, DualEncoderOutput, sum_of_terms
from hf_longclip.modeling_common.positions import stretch_position_embeddings
from hf_longclip.objectives.molo import MoLoLoss

from .configuration_himo_clip import HiMoCLIPConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-large-patch14"


class HiMoCLIPModel(DualEncoderMixin, CLIPModel):
    """CLIP with 248 text positions whose `forward(..., return_loss=True)` returns the MoLo loss (Eq. 4).

    `get_text_features`, `get_image_features` and `logits_per_image` are CLIP's (Appendix C.1: no HiDe at
    inference). The logit scale is a shape-(1,) parameter (DeepSpeed rejects 0-dim parameters).
    """

    config: HiMoCLIPConfig
    config_class = HiMoCLIPConfig

    def __init__(self, config: HiMoCLIPConfig):
        super().__init__(config)
        self.logit_scale = nn.Parameter(torch.tensor([config.logit_scale_init_value]))
        self.objective = MoLoLoss(config.hide_tau, config.molo_lambda, config.hide_scope, config.label_smoothing)

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, HiMoCLIPModel):  # CLIP's `_init_weights` leaves the logit scale out
            init.constant_(module.logit_scale, self.config.logit_scale_init_value)

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, stretch_positions: bool = True, **config_kwargs
    ) -> "HiMoCLIPModel":
        """Build a HiMo-CLIP from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`).

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (a 77-token baseline); `config_kwargs` set HiMo options (`hide_tau`, ...).
        """
        if not isinstance(clip, CLIPModel):
            clip = CLIPModel.from_pretrained(clip)
        state = clip.state_dict()
        key = "text_model.embeddings.position_embedding.weight"
        if stretch_positions:
            state[key] = stretch_position_embeddings(state[key])
        state["logit_scale"] = state["logit_scale"].reshape(1)
        text_config = clip.config.text_config.to_dict()
        text_config["max_position_embeddings"] = state[key].shape[0]
        config = HiMoCLIPConfig(
            text_config=text_config,
            vision_config=clip.config.vision_config.to_dict(),
            projection_dim=clip.config.projection_dim,
            logit_scale_init_value=clip.config.logit_scale_init_value,
            **config_kwargs,
        )
        model = cls(config)
        model.load_state_dict(state, strict=False)
        missing = set(model.state_dict()) - set(state)
        if any(not name.endswith("position_ids") for name in missing):
            raise ValueError(f"weights missing from the CLIP checkpoint: {sorted(missing)}")
        return model.to(clip.dtype)

    def get_text_features(self, input_ids: torch.Tensor, *args, **kwargs):
        self._check_end_of_text(input_ids)
        return super().get_text_features(input_ids, *args, **kwargs)

    def _check_end_of_text(self, input_ids: torch.Tensor) -> None:
        """Every text must contain the end-of-text token, where CLIP pools. Checked in eager mode only: under
        torch.compile, torch.export or torch.jit tracing, a data-dependent branch would break the graph (and add a
        host sync to every compiled step), so there the caller answers for its inputs, as with CLIP itself."""
        eos_token_id = self.config.text_config.eos_token_id
        if eos_token_id == 2 or is_tracing(input_ids):  # 2: CLIP's legacy id, pooled at the largest id instead
            return
        if not (input_ids == eos_token_id).any(dim=-1).all():
            raise ValueError(
                f"every text must contain the end-of-text token (id {eos_token_id}): CLIP pools its embedding there. "
                "Tokenize with the model's processor, which keeps it when truncating."
            )

    @can_return_tuple
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
        vision_outputs = self.get_image_features(
            pixel_values=pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, return_dict=True, **kwargs
        )
        text_outputs = self.get_text_features(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, return_dict=True, **kwargs
        )
        image_embeds = F.normalize(vision_outputs.pooler_output, dim=-1)
        text_embeds = F.normalize(text_outputs.pooler_output, dim=-1)
        logit_scale = self.logit_scale.exp()
        logits_per_text = logit_scale * text_embeds @ image_embeds.T
        loss = loss_terms = None
        if return_loss:
            loss_terms = self.objective(image_embeds, text_embeds, logit_scale)
            loss = sum_of_terms(loss_terms)
        return DualEncoderOutput(
            loss=loss,
            loss_terms=loss_terms,
            logits_per_image=logits_per_text.T,
            logits_per_text=logits_per_text,
            text_embeds=text_embeds,
            image_embeds=image_embeds,
            text_model_output=text_outputs,
            vision_model_output=vision_outputs,
        )


__all__ = ["HiMoCLIPModel"]
