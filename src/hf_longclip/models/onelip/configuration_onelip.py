"""OneLIP configuration: CLIP's vision configuration, a RoPE text configuration (no position table) and the
TRIM / loss hyper-parameters of OneLIP (Pan et al., "Unlocking and Improving Long-Text Representations of CLIP via
One-Stage Adaptation")."""

from transformers import CLIPConfig, CLIPTextConfig, CLIPVisionConfig, PreTrainedConfig

from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.objectives.onelip import TRIM_DECOMPOSITIONS

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
    """

    model_type = "onelip_text_model"

    max_position_embeddings: int = ONELIP_TEXT_POSITIONS
    base_length: int = 77
    rope_gamma: float = 8.0
    rope_theta: float = 10000.0

    def __post_init__(self, **kwargs):
        head_dim, remainder = divmod(self.hidden_size, self.num_attention_heads)
        if remainder == 0 and (head_dim < 4 or head_dim % 2):
            raise ValueError(
                f"RoPE needs an even head dimension >= 4, got hidden_size / num_attention_heads = {head_dim}"
            )
        if self.base_length < 2:
            raise ValueError(f"base_length must be >= 2 (start and end tokens), got {self.base_length}")
        if self.max_position_embeddings < 2:
            raise ValueError(f"max_position_embeddings must be >= 2, got {self.max_position_embeddings}")
        if self.rope_gamma < 1:
            raise ValueError(f"rope_gamma must be >= 1, got {self.rope_gamma}")
        if self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta}")
        super().__post_init__(**kwargs)


class OneLIPConfig(CodeBundleMixin, CLIPConfig):
    r"""
    Configuration of [`OneLIPModel`]: [`CLIPConfig`] arguments with an [`OneLIPTextConfig`] text part (248 tokens
    by default), plus OneLIP's training hyper-parameters (defaults from Sec. 4.1):

    trim_alpha (`float`, defaults to 0.5):
        alpha of S(i) = (1 - alpha) I(i) + alpha A(i) (Eq. 5).
    trim_top_k (`int`, defaults to 100):
        K, the number of tokens TRIM-Select keeps (texts with fewer valid tokens keep them all).
    trim_rank (`int`, defaults to 8):
        r, the number of singular directions of the structural importance I(i) (Eq. 4). The paper gives no value.
        8 is small enough that I(i) measures a token's share of the dominant components rather than its norm (with
        every direction, sum_j U_ij^2 sigma_j^2 = |z_i|^2, and after the final LayerNorm all tokens have nearly the
        same norm), and large enough to reach past the first direction, which CLIP's token states share.
    trim_decomposition (`str`, defaults to `"auto"`):
        How TRIM-Select finds the top r singular directions: `"exact"` (float64 `eigh` of each text's Gram matrix),
        `"subspace"` (float32 subspace iteration, matrix products: fast on GPUs) or `"auto"` (exact on CPU, subspace
        elsewhere); see `hf_longclip.objectives.onelip.top_right_singular_vectors`.
    coarse_weight, token_weight, contrastive_weight (`float`, defaults to 0.2, 0.1, 0.7):
        lambda_1, lambda_2, lambda_3 of Eq. 10 during the first `weight_switch_step` optimizer steps.
    coarse_weight_after, token_weight_after, contrastive_weight_after (`float`, defaults to 0.05, 0.25, 0.7):
        lambda_1, lambda_2, lambda_3 from step `weight_switch_step` on.
    weight_switch_step (`int`, defaults to 5000):
        The optimizer step at which the weights switch.
    token_distillation (`str`, defaults to `"trim"`):
        `"trim"`: TRIM-Select + TRIM-Refine + token-wise distillation (Eq. 4-7), OneLIP. `"pooled"`: the ablation
        without TRIM (mean-pooled student vs teacher states, see `hf_longclip.objectives.onelip`); TRIM-Refine's
        queries are then unused and frozen.
    """

    model_type = "onelip"
    sub_configs_defaults = {"vision_config": CLIPVisionConfig, "text_config": OneLIPTextConfig}

    trim_alpha: float = 0.5
    trim_top_k: int = 100
    trim_rank: int = 8
    trim_decomposition: str = "auto"
    coarse_weight: float = 0.2
    token_weight: float = 0.1
    contrastive_weight: float = 0.7
    coarse_weight_after: float = 0.05
    token_weight_after: float = 0.25
    contrastive_weight_after: float = 0.7
    weight_switch_step: int = 5000
    token_distillation: str = "trim"

    def __post_init__(self, **kwargs):
        if isinstance(self.text_config, PreTrainedConfig) and not isinstance(self.text_config, OneLIPTextConfig):
            self.text_config = self.text_config.to_dict()  # e.g. a CLIPTextConfig: rebuilt with OneLIP's fields
        if isinstance(self.text_config, dict):
            self.text_config = {k: v for k, v in self.text_config.items() if k != "model_type"}
        if not 0.0 <= self.trim_alpha <= 1.0:
            raise ValueError(f"trim_alpha must be in [0, 1], got {self.trim_alpha}")
        if self.trim_top_k < 1:
            raise ValueError(f"trim_top_k must be >= 1, got {self.trim_top_k}")
        if self.trim_rank < 1:
            raise ValueError(f"trim_rank must be >= 1, got {self.trim_rank}")
        if self.trim_decomposition not in TRIM_DECOMPOSITIONS:
            raise ValueError(f"trim_decomposition must be one of {TRIM_DECOMPOSITIONS}, got {self.trim_decomposition!r}")
        for name in ("coarse_weight", "token_weight", "contrastive_weight", "coarse_weight_after",
                     "token_weight_after", "contrastive_weight_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.token_distillation not in ("trim", "pooled"):
            raise ValueError(f"token_distillation must be 'trim' or 'pooled', got {self.token_distillation!r}")
        if self.weight_switch_step < 0:
            raise ValueError(f"weight_switch_step must be >= 0, got {self.weight_switch_step}")
        super().__post_init__(**kwargs)


__all__ = ["OneLIPConfig", "OneLIPTextConfig"]
