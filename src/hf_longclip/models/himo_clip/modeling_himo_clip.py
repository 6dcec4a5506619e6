"""HiMo-CLIP (Wu et al., "Modeling Semantic Hierarchy and Monotonicity in Vision-Language Alignment", AAAI 2026).

A CLIP with 248 text positions, trained with MoLo = global InfoNCE + lambda * InfoNCE against HiDe components
(in-batch PCA of the text embeddings; `hf_longclip.objectives.himo_clip`, applied by
`hf_longclip.recipes.himo_clip.task.HiMoCLIPTask`). Inference is plain CLIP cosine similarity.
"""

from transformers import CLIPModel

from hf_longclip.modeling_common.clip_dual_encoder import CLIPDualEncoder
from hf_longclip.modeling_common.positions import LONGCLIP_KEEP_POSITIONS, KeptRowsEmbedding

from .configuration_himo_clip import HiMoCLIPConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-large-patch14"


class HiMoCLIPModel(CLIPDualEncoder):
    """
    CLIP with 248 text positions. `get_text_features`, `get_image_features` and `logits_per_image` are CLIP's
    (Appendix C.1: no HiDe at inference); `forward(return_loss=True)` returns CLIP's InfoNCE over the given local
    batch. MoLo (Eq. 4) over the global batch is `HiMoCLIPTask`'s. The first `config.frozen_position_rows` text
    position rows receive no gradient.

    Args:
        config ([`HiMoCLIPConfig`]): the model's configuration.
    """

    config: HiMoCLIPConfig
    config_class = HiMoCLIPConfig

    def __init__(self, config: HiMoCLIPConfig):
        super().__init__(config)
        embeddings = self.text_model.embeddings
        table = embeddings.position_embedding
        embeddings.position_embedding = KeptRowsEmbedding(*table.weight.shape, config.frozen_position_rows,
                                                          device="meta")
        embeddings.position_embedding.weight = table.weight  # the same parameter: its name and initialisation

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, stretch_positions: bool = True,
        frozen_position_rows: int | None = None, trust_remote_code: bool = False, **config_kwargs,
    ) -> "HiMoCLIPModel":
        """Build a HiMo-CLIP from a CLIP checkpoint (Hub id, local directory or in-memory `CLIPModel`; the
        checkpoint's own code runs only with `trust_remote_code=True`).

        The text position table is stretched with Long-CLIP's knowledge-preserved scheme (77 -> 248) unless
        `stretch_positions=False` (a 77-token baseline); `config_kwargs` set configuration options.
        `frozen_position_rows` (see `HiMoCLIPConfig`) defaults to the 20 rows stretching keeps, as Long-CLIP
        fine-tunes, and to 0 without stretching.
        """
        if frozen_position_rows is None:
            frozen_position_rows = LONGCLIP_KEEP_POSITIONS if stretch_positions else 0
        return super().from_clip(clip, stretch_positions, trust_remote_code, frozen_position_rows=frozen_position_rows,
                                 **config_kwargs)


__all__ = ["HiMoCLIPModel"]
