"""HiMo-CLIP (Wu et al., "Modeling Semantic Hierarchy and Monotonicity in Vision-Language Alignment", AAAI 2026).

A CLIP with 248 text positions trained with MoLo = global InfoNCE + lambda * InfoNCE against HiDe components
(in-batch PCA of the text embeddings; `hf_longclip.objectives.molo`). Inference is plain CLIP cosine similarity.
"""

import torch
from transformers import CLIPModel
from transformers.utils import can_return_tuple

from hf_longclip.modeling_common.clip_dual_encoder import CLIPDualEncoder
from hf_longclip.modeling_common.dual_encoder import DualEncoderOutput
from hf_longclip.objectives.molo import MoLoLoss

from .configuration_himo_clip import HiMoCLIPConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-large-patch14"


class HiMoCLIPModel(CLIPDualEncoder):
    """CLIP with 248 text positions whose `forward(..., return_loss=True)` returns the MoLo loss (Eq. 4).

    `get_text_features`, `get_image_features` and `logits_per_image` are CLIP's (Appendix C.1: no HiDe at
    inference).
    """

    config: HiMoCLIPConfig
    config_class = HiMoCLIPConfig

    def __init__(self, config: HiMoCLIPConfig):
        super().__init__(config)
        self.objective = MoLoLoss(config.hide_tau, config.molo_lambda, config.hide_scope, config.label_smoothing,
                                  config.hide_modalities, config.molo_global)

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, stretch_positions: bool = True, **config_kwargs
    ) -> "HiMoCLIPModel":
        """Build a HiMo-CLIP from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`).

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (a 77-token baseline); `config_kwargs` set HiMo options (`hide_tau`, ...).
        """
        return super().from_clip(clip, stretch_positions, **config_kwargs)

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
        vision_outputs, text_outputs, image_embeds, text_embeds = self.encode_pair(
            input_ids, pixel_values, attention_mask, position_ids, interpolate_pos_encoding, **kwargs
        )
        loss_terms = self.objective(image_embeds, text_embeds, self.logit_scale.exp()) if return_loss else None
        return self.pair_output(vision_outputs, text_outputs, image_embeds, text_embeds, loss_terms)


__all__ = ["HiMoCLIPModel"]
