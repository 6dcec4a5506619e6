"""HiMo-CLIP (Wu et al., "Modeling Semantic Hierarchy and Monotonicity in Vision-Language Alignment", AAAI 2026).

A CLIP with 248 text positions, trained with MoLo = global InfoNCE + lambda * InfoNCE against HiDe components
(in-batch PCA of the text embeddings; `hf_longclip.models.himo_clip.objective`, applied by
`hf_longclip.models.himo_clip.task.HiMoCLIPTask`). Inference is plain CLIP cosine similarity.
"""

from transformers import CLIPModel

from hf_longclip.modeling_common.clip_dual_encoder import CLIPDualEncoder

from .configuration_himo_clip import HiMoCLIPConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-large-patch14"


class HiMoCLIPModel(CLIPDualEncoder):
    """CLIP with 248 text positions. `get_text_features`, `get_image_features` and `logits_per_image` are CLIP's
    (Appendix C.1: no HiDe at inference); `forward(return_loss=True)` returns CLIP's InfoNCE over the given local
    batch. MoLo (Eq. 4) over the global batch is `HiMoCLIPTask`'s.
    """

    config: HiMoCLIPConfig
    config_class = HiMoCLIPConfig

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, stretch_positions: bool = True,
        trust_remote_code: bool = False, **config_kwargs,
    ) -> "HiMoCLIPModel":
        """Build a HiMo-CLIP from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`; the
        checkpoint's own code runs only with `trust_remote_code=True`).

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (a 77-token baseline); `config_kwargs` set configuration options.
        """
        return super().from_clip(clip, stretch_positions, trust_remote_code, **config_kwargs)


__all__ = ["HiMoCLIPModel"]
