"""F-CAST configuration ("Aligning Forest and Trees in Images and Long Captions", Sec. 3-4.1): a CAST vision
configuration, a hierarchical text configuration (stage 1 over each chunk, stage 2 over the chunk embeddings) and
the two-level loss's temperatures and biases. Switches give the architectures of its Table 2 between FLAIR and
F-CAST: a ViT instead of CAST, CLIP's flat text encoder instead of the hierarchical one (FLAIR's flat loss instead of
the two-level one is the training task's choice, `hf_longclip.recipes.fcast.task.FCASTTask`)."""

import math

from transformers import CLIPTextConfig, CLIPVisionConfig, PretrainedConfig

from hf_longclip.modeling_common.configuration import sub_config_dict
from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.transformers_compat import sub_config_specs
from hf_longclip.models.cast.configuration_cast import CASTVisionConfig


class FCASTTextConfig(CLIPTextConfig):
    r"""
    Configuration of F-CAST's hierarchical text encoder (Eq. 1-3): [`CLIPTextConfig`] arguments describe stage 1
    (`num_hidden_layers` = L1 = 8 blocks, causal, `max_position_embeddings` = 77 tokens per chunk, pooled at the
    end-of-text token); stage 2 has the same width and heads and these:

    num_stage2_layers (`int`, defaults to 4):
        L2, the blocks of stage 2 (bidirectional, over [CLS] and the chunk embeddings). 0 gives CLIP's flat text
        encoder (FLAIR's, Table 2's first two rows): no adapter, no stage 2, a caption read as one chunk (N = 1)
        truncated to `max_position_embeddings`.
    num_chunks (`int`, defaults to 4):
        N, the chunks of a long caption: stage 2's context is N plus [CLS] (a caption may also come as fewer chunks).
    adapter_reduction (`int`, defaults to 4), adapter_ratio (`float`, defaults to 0.2):
        The residual MLP adapter before stage 2 (CLIP-Adapter, Gao et al. 2024): x + ratio * (MLP(x) - x), MLP =
        Linear(D, D / reduction), ReLU, Linear(D / reduction, D), ReLU (CLIP-Adapter's values).
    """

    model_type = "fcast_text_model"

    def __init__(self, num_hidden_layers: int = 8, max_position_embeddings: int = 77, num_stage2_layers: int = 4,
                 num_chunks: int = 4, adapter_reduction: int = 4, adapter_ratio: float = 0.2, **kwargs):
        super().__init__(num_hidden_layers=num_hidden_layers, max_position_embeddings=max_position_embeddings,
                         **kwargs)
        if num_stage2_layers < 0:
            raise ValueError(f"num_stage2_layers must be >= 0 (0: a flat text encoder), got {num_stage2_layers}")
        if num_chunks < 1:
            raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
        if not num_stage2_layers and num_chunks != 1:
            raise ValueError(f"a flat text encoder (num_stage2_layers=0) reads a caption as one chunk: num_chunks "
                             f"must be 1, got {num_chunks}")
        if adapter_reduction < 1 or self.hidden_size % adapter_reduction:
            raise ValueError(f"adapter_reduction must divide hidden_size ({self.hidden_size}), got "
                             f"{adapter_reduction}")
        if not 0.0 <= adapter_ratio <= 1.0:
            raise ValueError(f"adapter_ratio must be in [0, 1], got {adapter_ratio}")
        self.num_stage2_layers, self.num_chunks = num_stage2_layers, num_chunks
        self.adapter_reduction, self.adapter_ratio = adapter_reduction, adapter_ratio

    @property
    def is_hierarchical(self) -> bool:
        """Whether stage 2 composes chunk embeddings (F-CAST) or the caption is one chunk (CLIP's flat encoder)."""
        return self.num_stage2_layers > 0


VISION_BACKBONES = {"cast": CASTVisionConfig, "vit": CLIPVisionConfig}
ATTENTION_POOLINGS = ("fcast", "flair")


class FCASTConfig(CodeBundleMixin, PretrainedConfig):
    r"""
    Configuration of [`FCASTModel`]: `text_config` ([`FCASTTextConfig`]), `vision_config` ([`CASTVisionConfig`], or
    [`CLIPVisionConfig`] with `vision_backbone="vit"`).

    vision_backbone (`str`, defaults to `"cast"`):
        "cast" (F-CAST) or "vit" (transformers' CLIP vision transformer, FLAIR's; its [CLS] is the global image and
        its top-layer patch tokens are what sub-captions ground in).
    projection_dim (`int`, defaults to 512):
        The joint embedding width (Sec. 4.1: 512 for image and text features).
    pool_heads (`int`, defaults to 8):
        Heads of the text-grounded attention pooling (Eq. 6); must divide `projection_dim`.
    attention_pooling (`str`, defaults to `"fcast"`):
        "fcast": the pooling attends over the grounding tokens as the vision tower outputs them, keys and values
        sharing one LayerNorm. "flair": FLAIR's released pooling (`PureAttentionPoolingBlock`), for its converted
        checkpoints: the tokens after the vision tower's final LayerNorm and `visual_projection` (as FLAIR's
        `image_post`), separate LayerNorms on keys and values, and a zero key/value (`add_zero_attn`).
    grounding_stage (`int`, defaults to 1):
        Which CAST stage's segment tokens the pooling attends to: the second (index 1, 64 segments, v^fine). A ViT
        has one level, its patch tokens. FLAIR grounds in the top layer: its CAST variant sets the last stage.
    part_logit_scale_init_value, whole_logit_scale_init_value (`float`, defaults to log(1 / 0.07)):
        log of the temperature factor tau_part / tau_whole of Eq. 7-8 (Sec. 4.1: temperature 0.07, so the logits are
        scaled by 1 / 0.07 at the start; learnable, stored as a log).
    part_logit_bias_init_value, whole_logit_bias_init_value (`float`, defaults to -10.0):
        b_part / b_whole (Sec. 4.1, SigLIP's -10).
    """

    model_type = "fcast"
    sub_configs = {"text_config": FCASTTextConfig, "vision_config": CASTVisionConfig}  # 4.57-5.19 read this
    sub_configs_defaults = sub_config_specs(sub_configs)  # 5.20 and later read this

    def __init__(self, text_config=None, vision_config=None, vision_backbone: str = "cast", projection_dim: int = 512,
                 pool_heads: int = 8, attention_pooling: str = "fcast", grounding_stage: int = 1,
                 part_logit_scale_init_value: float = math.log(1 / 0.07),
                 whole_logit_scale_init_value: float = math.log(1 / 0.07), part_logit_bias_init_value: float = -10.0,
                 whole_logit_bias_init_value: float = -10.0, initializer_factor: float = 1.0, **kwargs):
        if attention_pooling not in ATTENTION_POOLINGS:
            raise ValueError(f"attention_pooling must be one of {ATTENTION_POOLINGS}, got {attention_pooling!r}")
        if vision_backbone not in VISION_BACKBONES:
            raise ValueError(f"vision_backbone must be one of {list(VISION_BACKBONES)}, got {vision_backbone!r}")
        vision_class = VISION_BACKBONES[vision_backbone]
        if isinstance(vision_config, PretrainedConfig) and not isinstance(vision_config, vision_class):
            raise ValueError(f"vision_backbone={vision_backbone!r} needs a {vision_class.__name__}, got "
                             f"{type(vision_config).__name__}")
        if not isinstance(text_config, FCASTTextConfig):
            text_config = FCASTTextConfig(**sub_config_dict(text_config))
        if not isinstance(vision_config, vision_class):  # the backbone picks the class (defaults: CAST's)
            vision_config = vision_class(**sub_config_dict(vision_config))
        if projection_dim < 1 or pool_heads < 1 or projection_dim % pool_heads:
            raise ValueError(f"pool_heads ({pool_heads}) must divide projection_dim ({projection_dim})")
        stages = len(getattr(vision_config, "depths", [None]))  # a ViT: one level
        if vision_backbone == "cast" and not 0 <= grounding_stage < stages:
            raise ValueError(f"grounding_stage must index one of CAST's {stages} stages, got {grounding_stage}")
        self.text_config, self.vision_config, self.vision_backbone = text_config, vision_config, vision_backbone
        self.projection_dim, self.pool_heads, self.attention_pooling = projection_dim, pool_heads, attention_pooling
        self.grounding_stage = grounding_stage
        self.part_logit_scale_init_value = part_logit_scale_init_value
        self.whole_logit_scale_init_value = whole_logit_scale_init_value
        self.part_logit_bias_init_value = part_logit_bias_init_value
        self.whole_logit_bias_init_value = whole_logit_bias_init_value
        self.initializer_factor = initializer_factor
        super().__init__(**kwargs)


__all__ = ["ATTENTION_POOLINGS", "FCASTConfig", "FCASTTextConfig", "VISION_BACKBONES"]
