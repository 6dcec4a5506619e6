"""OneLIP configuration: CLIP's vision configuration and a RoPE text configuration without a position table (Pan et
al., "Unlocking and Improving Long-Text Representations of CLIP via One-Stage Adaptation")."""

from transformers import CLIPConfig, CLIPTextConfig, CLIPVisionConfig

from hf_longclip.modeling_common.configuration import RefusesPlainCLIPMixin, sub_config_dict
from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.transformers_compat import sub_config_specs

ONELIP_TEXT_POSITIONS = 248  # the paper's T_g in its main tables (Long-CLIP's length)


class OneLIPTextConfig(CLIPTextConfig):
    r"""
    Configuration of OneLIP's long text encoder: [`CLIPTextConfig`] without an absolute position table; queries and
    keys of every self-attention layer are rotated (RoPE, Eq. 2) with NTK-scaled frequencies (Sec. 4.1).

    max_position_embeddings (`int`, defaults to 248):
        T_g, the longest text (in tokens) the encoder takes and the length its NTK scaling is set for.
    base_length (`int`, defaults to 77):
        T_f, the base (teacher) encoder's length. Also L2, the number of TRIM-Refine queries: query i is distilled
        against the base encoder's output token i (Eq. 7), and the number of tokens of L_coarse (Eq. 3).
    rope_gamma (`float`, defaults to 8.0):
        gamma of the NTK factor (gamma * T_g / T_f) - (gamma - 1) (Sec. 4.1); T_g <= T_f gives factor 1 (plain RoPE).
    rope_theta (`float`, defaults to 10000.0):
        RoPE base before scaling (RoFormer's; the paper gives none).
    rope_ntk_scaling (`bool`, defaults to `True`):
        Whether the frequencies are NTK-scaled (Sec. 4.1). False: plain RoPE at every length, as TULIP's released
        inference code runs its checkpoints (`hf_longclip.models.onelip.convert_tulip`).
    """

    model_type = "onelip_text_model"

    def __init__(self, max_position_embeddings: int = ONELIP_TEXT_POSITIONS, base_length: int = 77,
                 rope_gamma: float = 8.0, rope_theta: float = 10000.0, rope_ntk_scaling: bool = True, **kwargs):
        super().__init__(max_position_embeddings=max_position_embeddings, **kwargs)
        head_dim, remainder = divmod(self.hidden_size, self.num_attention_heads)
        if remainder == 0 and (head_dim < 4 or head_dim % 2):
            raise ValueError(
                f"RoPE needs an even head dimension >= 4, got hidden_size / num_attention_heads = {head_dim}"
            )
        if base_length < 2:
            raise ValueError(f"base_length must be >= 2 (start and end tokens), got {base_length}")
        if max_position_embeddings < 2:
            raise ValueError(f"max_position_embeddings must be >= 2, got {max_position_embeddings}")
        if rope_gamma < 1:
            raise ValueError(f"rope_gamma must be >= 1, got {rope_gamma}")
        if rope_theta <= 0:
            raise ValueError(f"rope_theta must be > 0, got {rope_theta}")
        self.base_length, self.rope_gamma, self.rope_theta = base_length, rope_gamma, rope_theta
        self.rope_ntk_scaling = rope_ntk_scaling


class OneLIPConfig(CodeBundleMixin, RefusesPlainCLIPMixin, CLIPConfig):
    r"""
    Configuration of [`OneLIPModel`]: [`CLIPConfig`] arguments with an [`OneLIPTextConfig`] text part (248 tokens
    by default). TRIM's and Eq. 10's hyper-parameters (alpha, K, r, the loss weights and their schedule) are
    training options, arguments of `hf_longclip.recipes.onelip.task.OneLIPTask`, not part of the model.
    """

    model_type = "onelip"
    sub_configs = {"vision_config": CLIPVisionConfig, "text_config": OneLIPTextConfig}  # 4.57-5.19 read this
    sub_configs_defaults = sub_config_specs(sub_configs)  # 5.20 and later read this

    def __init__(self, text_config=None, vision_config=None, **kwargs):
        text_config = sub_config_dict(text_config)  # e.g. a CLIPTextConfig: rebuilt with OneLIP's fields
        super().__init__(text_config=text_config, vision_config=sub_config_dict(vision_config), **kwargs)
        if not isinstance(self.text_config, OneLIPTextConfig):  # 4.57-5.4: CLIP's __init__ built a CLIPTextConfig
            self.text_config = OneLIPTextConfig(**text_config)


__all__ = ["OneLIPConfig", "OneLIPTextConfig"]
