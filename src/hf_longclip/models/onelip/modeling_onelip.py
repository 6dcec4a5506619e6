"""OneLIP (Pan et al., "Unlocking and Improving Long-Text Representations of CLIP via One-Stage Adaptation").

A dual encoder: CLIP's vision tower and a long text encoder, CLIP's text encoder with its absolute position table
removed and rotary embeddings (Eq. 2) with NTK-scaled frequencies (Sec. 4.1) on the queries and keys of every
self-attention layer. Retrieval embeddings are CLIP's: the projected image [CLS] and end-of-text embeddings, the
text one independent of any image. Training is Eq. 10 (`hf_longclip.objectives.onelip.OneLIPLoss`), applied by
`hf_longclip.recipes.onelip.task.OneLIPTask` to `OneLIPForPreTraining`: `OneLIPModel` plus TRIM (Eq. 4-6), whose
TRIM-Refine has learnable queries that only training uses, as transformers keeps pre-training heads apart from the
base model. The task passes TRIM-Select's options (K, alpha, r) to the pre-training model's forward and holds the
frozen base encoder (the teacher): training state, not part of either model.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CLIPModel, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPooling

from hf_longclip.modeling_common.dual_encoder import (
    DualEncoderMixin,
    DualEncoderOutput,
    check_input_ids,
    end_of_text_positions,
    load_clip_model,
    model_from_clip,
)
from hf_longclip.modeling_common.initialization import InitializesEveryModuleMixin, default_initialization
from hf_longclip.modeling_common.positions import RotaryEmbedding, ntk_inverse_frequencies
from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.transformer import (
    MLP,
    EncoderLayer,
    Recorder,
    SelfAttention,
    asked_outputs,
    attention_mask_for,
    returns_tuple_when_asked,
    run_layers,
)
from hf_longclip.modeling_common.transformers_compat import clip_tower, init

from .configuration_onelip import ONELIP_TEXT_POSITIONS, OneLIPConfig, OneLIPTextConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-base-patch16"


def inverse_frequencies(config: OneLIPTextConfig) -> torch.Tensor:
    """The text encoder's RoPE inverse frequencies: NTK factor (gamma T_g / T_f) - (gamma - 1) (Sec. 4.1), or 1
    (plain RoPE: the scaling evaluated at T_f itself) without `rope_ntk_scaling`."""
    target_length = config.max_position_embeddings if config.rope_ntk_scaling else config.base_length
    return ntk_inverse_frequencies(
        config.hidden_size // config.num_attention_heads, config.base_length, target_length,
        config.rope_gamma, config.rope_theta,
    )


def text_token_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, eos_token_id: int) -> torch.Tensor:
    """(B, L) True at each text's valid tokens: up to its end-of-text token and inside the attention mask."""
    ends = end_of_text_positions(input_ids, eos_token_id)
    valid = torch.arange(input_ids.shape[-1], device=input_ids.device) <= ends[:, None]
    return valid if attention_mask is None else valid & attention_mask.bool()


class OneLIPTextEmbeddings(nn.Module):
    """Token embeddings only: positions enter through the rotary embeddings of every attention layer."""

    def __init__(self, config: OneLIPTextConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(input_ids)


class OneLIPEncoderLayer(EncoderLayer):
    """CLIP's block with a causal self-attention whose queries and keys the encoder rotates (RoPE). The causal
    attention is built after, and replaces, the block's own: the draws a seed has always made here."""

    def __init__(self, config: OneLIPTextConfig):
        super().__init__(config)
        self.self_attn = SelfAttention(config, is_causal=True)


class OneLIPEncoder(nn.Module):
    """
    `config.num_hidden_layers` causal CLIP blocks ([`OneLIPEncoderLayer`]) whose self-attention rotates queries and
    keys (RoPE): CLIP's text encoder with rotary positions.

    Args:
        config: OneLIPTextConfig
    """

    def __init__(self, config: OneLIPTextConfig):
        super().__init__()
        self.layers = nn.ModuleList([OneLIPEncoderLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                rotary: tuple[torch.Tensor, torch.Tensor], recorder: Recorder | None = None) -> BaseModelOutput:
        hidden_states = run_layers(self.layers, hidden_states, attention_mask, rotary, recorder)
        return BaseModelOutput(last_hidden_state=hidden_states)


# TRIM-Select (Eq. 4-5), which only `OneLIPForPreTraining.forward` runs: the choices made where the paper is silent
# are listed in `hf_longclip.objectives.onelip`'s docstring.
_EPS = 1e-8


def _min_max(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each row rescaled to [0, 1] over its valid entries (0 where the row is constant or invalid)."""
    low = scores.masked_fill(~valid, float("inf")).amin(dim=-1, keepdim=True)
    high = scores.masked_fill(~valid, float("-inf")).amax(dim=-1, keepdim=True)
    scaled = (scores - low) / (high - low).clamp_min(_EPS)
    return scaled.masked_fill(~valid, 0.0)


TRIM_DECOMPOSITIONS = ("auto", "exact", "subspace")


def orthonormal_columns(matrix: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis of the column space of each (n, k) matrix of a batch (the Q of a thin QR, columns up to
    sign): classical Gram-Schmidt, each column projected off those before it three times (twice is as stable as
    Householder QR for a full-rank matrix; the third pass keeps the columns orthonormal when the matrix is
    rank-deficient, where a column's remainder is rounding noise), k steps of batched products whatever the batch
    size, where a batched QR on a GPU may run one solver call per matrix."""
    columns = []
    for column in matrix.unbind(-1):
        for _ in range(3 if columns else 0):
            basis = torch.stack(columns, dim=-1)
            column = column - (basis @ (basis.mT @ column[..., None]))[..., 0]
        columns.append(F.normalize(column, dim=-1, eps=_EPS))
    return torch.stack(columns, dim=-1)


def top_right_singular_vectors(matrix: torch.Tensor, rank: int, decomposition: str = "auto",
                               iterations: int = 4, oversampling: int = 8) -> torch.Tensor:
    """The top `rank` right singular vectors of each (L, d) matrix of `matrix` (B, L, d), as columns (B, d, r),
    largest singular value first.

    "exact": the top eigenvectors of the d x d Gram matrix Z^T Z from one float64 `eigh` per text. "subspace":
    subspace iteration in float32 (Halko et al. 2011, Alg. 4.4 on the Gram matrix): r + `oversampling` columns,
    `iterations` Gram products each orthonormalised (`orthonormal_columns`, batched), then Rayleigh-Ritz, an `eigh` of a
    (r + 8)-square matrix; its error falls as (sigma_{r+9} / sigma_r)^(2 x iterations). Batched `eigh` is slow on GPUs
    (1.1 s of a 1.4 s ViT-B/16 step at batch 256 on an H100, float64), subspace iteration is matrix products (54 ms
    there). "auto": exact on CPU, subspace on other devices. Columns are defined up to sign, which I(i) ignores."""
    if decomposition == "auto":
        decomposition = "exact" if matrix.device.type == "cpu" else "subspace"
    width = matrix.shape[-1]
    r = min(rank, *matrix.shape[1:])
    if decomposition == "exact":
        matrix = matrix.double()
        return torch.linalg.eigh(matrix.mT @ matrix).eigenvectors[..., -r:].flip(-1)  # eigenvalues ascending
    if decomposition != "subspace":
        raise ValueError(f"decomposition must be one of {TRIM_DECOMPOSITIONS}, got {decomposition!r}")
    gram = matrix.float().mT @ matrix.float()
    columns = min(width, r + oversampling)
    start = torch.randn(width, columns, generator=torch.Generator().manual_seed(0)).to(gram.device)
    basis = start.expand(gram.shape[0], -1, -1)
    for _ in range(iterations):
        basis = orthonormal_columns(gram @ basis)
    ritz = torch.linalg.eigh(basis.mT @ gram @ basis).eigenvectors[..., -r:].flip(-1)
    return basis @ ritz


@torch.no_grad()
def trim_scores(
    states: torch.Tensor, token_embeds: torch.Tensor, image_embeds: torch.Tensor, valid: torch.Tensor,
    rank: int, alpha: float, decomposition: str = "auto",
) -> torch.Tensor:
    """S(i) = (1 - alpha) I(i) + alpha A(i) (Eq. 5) for every token, -inf at invalid ones.

    I(i) = sum_{j<=r} |U_ij| sigma_j (Eq. 4) over the SVD Z = U Sigma V^T of each text's valid token states (padding
    rows are zeroed, which leaves the singular triplets of the valid rows unchanged and gives padding I = 0); A(i) the
    cosine of `token_embeds[i]` (the projected token state) with `image_embeds`. Both min-max scaled per text.
    `states` (B, L, d), `token_embeds` (B, L, P), `image_embeds` (B, P), `valid` (B, L) bool.

    Computed without a batched SVD: U_ij sigma_j = z_i . v_j, so I(i) = sum_{j<=r} |z_i . v_j| with the top r right
    singular vectors v_j (`top_right_singular_vectors`, `decomposition` "exact", "subspace" or "auto"). The same
    numbers as the SVD (tested, to float32 rounding) from a d x d instead of an L x d decomposition: on 2 CPU
    threads shared with other jobs the batched SVD took 23 of a 27 s OneLIP step (batch 64, 248 tokens, width 128)
    and the exact form 0.2 s.
    """
    matrix = states.float().masked_fill(~valid[..., None], 0.0)
    vectors = top_right_singular_vectors(matrix, rank, decomposition)
    importance = (matrix.to(vectors.dtype) @ vectors).abs().sum(dim=-1).float()
    relevance = (F.normalize(token_embeds.float(), dim=-1) * F.normalize(image_embeds.float(), dim=-1)[:, None]).sum(-1)
    scores = (1 - alpha) * _min_max(importance, valid) + alpha * _min_max(relevance, valid)
    return scores.masked_fill(~valid, float("-inf"))


def trim_select(states: torch.Tensor, scores: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TRIM-Select's compact sequence Z'_text: the states of the top-K tokens by `scores`, in text order, and which
    of them are real tokens (False for slots beyond a text's valid tokens when it has fewer than K, and for every
    slot past the sequence length). Gradient flows to the selected states."""
    k = min(top_k, scores.shape[1])
    top = scores.topk(k, dim=1)
    order = top.indices.argsort(dim=1)
    indices, kept = top.indices.gather(1, order), torch.isfinite(top.values.gather(1, order))
    selected = states.gather(1, indices[..., None].expand(-1, -1, states.shape[-1]))
    return selected, kept


def raise_on_non_finite(inputs: dict, computation: str) -> None:
    """A ValueError naming the `inputs` (name -> tensor or None) that hold NaN or inf, if any do, as the reason
    `computation` (e.g. "OneLIP's loss") is not finite."""
    broken = [name for name, tensor in inputs.items() if tensor is not None and not tensor.isfinite().all()]
    if broken:
        raise ValueError(f"{computation} is not finite: the {', '.join(broken)} contain NaN or inf")


def select_tokens(text_states: torch.Tensor, token_embeds: torch.Tensor, image_embeds: torch.Tensor,
                  valid: torch.Tensor, top_k: int, alpha: float, rank: int,
                  decomposition: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """TRIM-Select (Eq. 4-5) in float32 with autocast off: the top-`top_k` token states by S(i) (`trim_scores` with
    `rank` and `alpha`, `trim_select`) and which are real. `text_states` (B, L, d), `token_embeds` (B, L, P) the same
    projected (for A(i)), `image_embeds` (B, P), `valid` (B, L). What `OneLIPForPreTraining.forward` runs with the
    options its `trim_*` arguments give."""
    with torch.autocast(device_type=text_states.device.type, enabled=False):
        states = text_states.float()
        try:
            scores = trim_scores(states, token_embeds, image_embeds.float(), valid, rank, alpha, decomposition)
        except torch.linalg.LinAlgError:
            raise_on_non_finite({"long text encoder states": text_states, "image embeddings": image_embeds},
                                "TRIM-Select's score")
            raise
        return trim_select(states, scores, top_k)


class TRIMRefine(nn.Module):
    """
    TRIM-Refine (Eq. 6): Z_agg = Attn(Q, Z', Z'), L2 learnable queries Q in single-head scaled dot-product attention
    over the tokens TRIM-Select kept (`kept` False at padding slots, masked), in the tokens' dtype (autocast off:
    TRIM-Select gives float32 states). The head of `OneLIPForPreTraining`, whose output the token-wise distillation
    (`hf_longclip.objectives.onelip.OneLIPLoss`) compares with the teacher; not used by inference.

    Args:
        num_queries (`int`): L2, the number of learnable queries (T_f).
        dim (`int`): the width of the token states.
    """

    def __init__(self, num_queries: int, dim: int):
        super().__init__()
        self.queries = nn.Parameter(torch.empty(num_queries, dim))

    def forward(self, tokens: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        r"""
        Z_agg (Eq. 6).

        Args:
            tokens (`torch.FloatTensor` of shape `(batch_size, num_tokens, dim)`):
                Z', the token states TRIM-Select kept.
            kept (`torch.BoolTensor` of shape `(batch_size, num_tokens)`):
                True at real tokens, False at padding slots (not attended).

        Returns:
            `torch.FloatTensor` of shape `(batch_size, num_queries, dim)`: each query's attention-weighted mean of
            the kept token states.
        """
        queries = self.queries.to(tokens.dtype).expand(tokens.shape[0], -1, -1)
        with torch.autocast(device_type=tokens.device.type, enabled=False):
            return F.scaled_dot_product_attention(queries, tokens, tokens, attn_mask=kept[:, None, :])


class OneLIPPreTrainedModel(InitializesEveryModuleMixin, PreTrainedModel):
    """
    OneLIP's initialisation: the vision tower's is CLIP's (its own `_init_weights`); the text encoder's token
    embeddings, the linear layers of its attention and MLP blocks and its norms keep transformers' default
    (`default_initialization`: N(0, initializer_range)) rather than CLIP's depth-scaled rule, since OneLIP starts
    from CLIP's weights (`from_clip`) and these are the values a fresh OneLIP text encoder has always had here (the
    published figures' seeds draw them); then the parts OneLIP adds: the rotary frequencies
    (`inverse_frequencies`), TRIM-Refine's queries and the projections.
    """

    config: OneLIPConfig
    config_class = OneLIPConfig
    base_model_prefix = "onelip"
    input_modalities = ("image", "text")
    supports_gradient_checkpointing = True
    _supports_sdpa = True  # the text encoder's SDPA (`modeling_common.transformer`) and CLIP's vision tower
    _no_split_modules = ["OneLIPEncoderLayer", "CLIPEncoderLayer", "CLIPVisionEmbeddings"]
    new_weight_prefixes: tuple[str, ...] = ()  # weights CLIP checkpoints lack (`from_clip`)

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, (SelfAttention, MLP)):  # their linear layers: the default, drawn as leaves
            return
        default_initialization(module, self.config)
        factor = self.config.initializer_factor
        text_config = getattr(self.config, "text_config", self.config)
        if isinstance(module, RotaryEmbedding):
            init.copy_(module.inv_freq, inverse_frequencies(text_config))
        elif isinstance(module, TRIMRefine):
            init.normal_(module.queries, std=text_config.hidden_size**-0.5 * factor)
        elif isinstance(module, OneLIPModel):
            init.normal_(module.text_projection.weight, std=module.text_projection.in_features**-0.5 * factor)
            init.normal_(module.visual_projection.weight, std=module.visual_projection.in_features**-0.5 * factor)
            init.constant_(module.logit_scale, self.config.logit_scale_init_value)

    @classmethod
    def from_clip(
        cls, clip: "str | CLIPModel" = DEFAULT_CLIP_CHECKPOINT, max_length: int = ONELIP_TEXT_POSITIONS,
        trust_remote_code: bool = False, **config_kwargs,
    ):
        """A `OneLIPModel` (or `OneLIPForPreTraining`) initialised from a CLIP (Hub id, local directory or in-memory
        `CLIPModel`; the checkpoint's own code runs only with `trust_remote_code=True`) with `model_from_clip`: every
        weight copied but the text position table, which RoPE replaces; T_f is CLIP's text length, T_g =
        `max_length`; `config_kwargs` set configuration options. TRIM-Refine's queries (`OneLIPForPreTraining`) start
        from their init."""
        clip = load_clip_model(clip, trust_remote_code)
        base_length = clip.config.text_config.max_position_embeddings
        return model_from_clip(cls, clip, "drop", {"max_position_embeddings": max_length, "base_length": base_length},
                               **config_kwargs)


class OneLIPTextModel(OneLIPPreTrainedModel):
    """
    OneLIP's long text encoder, CLIP's text transformer with rotary positions (Eq. 2) instead of a position table:
    `last_hidden_state` (after the final LayerNorm) and `pooler_output` at the first end-of-text token, as CLIP's
    text model; any length up to `max_position_embeddings` (T_g).

    Args:
        config ([`OneLIPTextConfig`]): the text encoder's configuration.
    """

    config: OneLIPTextConfig
    config_class = OneLIPTextConfig
    input_modalities = ("text",)

    def __init__(self, config: OneLIPTextConfig):
        super().__init__(config)
        self.embeddings = OneLIPTextEmbeddings(config)
        self.rotary = RotaryEmbedding(inverse_frequencies(config))
        self.encoder = OneLIPEncoder(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.token_embedding

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings.token_embedding = value

    @returns_tuple_when_asked
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        The token states of the texts and their end-of-text embeddings.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, as the model's processor gives them (each text with its end-of-text token), at most
                `config.max_position_embeddings` of them.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                The positions the rotary embeddings rotate each token by (defaults to 0, 1, ...).

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`]: `last_hidden_state` (batch_size, sequence_length,
            hidden_size) and `pooler_output` (batch_size, hidden_size), the state of each text's first end-of-text
            token.
        """
        if input_ids is None:
            raise ValueError("You have to specify input_ids")
        if input_ids.shape[-1] > self.config.max_position_embeddings:
            raise ValueError(
                f"texts of {input_ids.shape[-1]} tokens exceed max_position_embeddings "
                f"({self.config.max_position_embeddings}), the length this encoder's RoPE is scaled for"
            )
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        check_input_ids(input_ids, self.config.vocab_size)
        ends = end_of_text_positions(input_ids, self.config.eos_token_id)
        hidden_states = self.embeddings(input_ids)
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[-1], device=input_ids.device)[None]
        # no cache: passed by position, the parameter's name changed in transformers 5.24 (past_key_values -> cache)
        recorder = Recorder(*asked_outputs(self.config, kwargs))
        mask = attention_mask_for(attention_mask, input_ids.shape[-1], causal=True)
        hidden_states = self.encoder(hidden_states, mask, self.rotary(position_ids), recorder).last_hidden_state
        last_hidden_state = self.final_layer_norm(hidden_states)
        pooled = last_hidden_state[torch.arange(last_hidden_state.shape[0], device=ends.device), ends]
        return BaseModelOutputWithPooling(last_hidden_state=last_hidden_state, pooler_output=pooled,
                                          **recorder.outputs())


class OneLIPModel(DualEncoderMixin, OneLIPPreTrainedModel):
    """
    OneLIP: CLIP's vision tower, the RoPE long text encoder ([`OneLIPTextModel`]), CLIP's projections and logit scale
    (shape (1,): DeepSpeed rejects 0-dim parameters). `get_text_features` and `get_image_features` are CLIPModel's
    (the text embedding takes no image); `forward(return_loss=True)` returns CLIP's InfoNCE over the given local
    batch (Eq. 1 alone; Eq. 10 needs the teacher: `OneLIPTask`). Loads the checkpoints `OneLIPForPreTraining` saves,
    without TRIM-Refine's queries, which inference does not use.

    Args:
        config ([`OneLIPConfig`]): the model's configuration.
    """

    config: OneLIPConfig
    config_class = OneLIPConfig
    _keys_to_ignore_on_load_unexpected = [r"^trim_refine\."]  # OneLIPForPreTraining's head

    def __init__(self, config: OneLIPConfig):
        super().__init__(config)
        text_config, vision_config = config.text_config, config.vision_config
        self.text_model = OneLIPTextModel(text_config)
        self.vision_model = clip_tower(vision_config, vision=True)
        self.visual_projection = nn.Linear(vision_config.hidden_size, config.projection_dim, bias=False)
        self.text_projection = nn.Linear(text_config.hidden_size, config.projection_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor([config.logit_scale_init_value]))
        self.post_init()


@dataclass
class OneLIPForPreTrainingOutput(DualEncoderOutput):
    r"""
    [`DualEncoderOutput`] plus TRIM-Refine's output.

    refined_text_states (`torch.FloatTensor` of shape `(batch_size, base_length, hidden_size)`):
        Z_agg = Attn(Q, Z', Z') (Eq. 6): the L2 = T_f learnable queries attending over the long encoder's token
        states that TRIM-Select kept (every valid token without `trim_top_k`).
    """

    refined_text_states: torch.FloatTensor | None = None


class OneLIPForPreTraining(CodeBundleMixin, OneLIPPreTrainedModel):
    """
    `OneLIPModel` with the head only training uses, TRIM (Eq. 4-6): TRIM-Select's choice of token states and
    TRIM-Refine's L2 = T_f learnable queries over them; what `OneLIPTask` trains. Its checkpoints load as `OneLIPModel`
    (`AutoModel`, zero-shot classification), without the queries; as `OneLIPForPreTraining`
    (`AutoModelForPreTraining`) with them, to train on.

    Args:
        config ([`OneLIPConfig`]): the model's configuration.
    """

    config: OneLIPConfig
    config_class = OneLIPConfig
    new_weight_prefixes = ("trim_refine.",)

    def __init__(self, config: OneLIPConfig):
        super().__init__(config)
        self.onelip = OneLIPModel(config)
        self.trim_refine = TRIMRefine(config.text_config.base_length, config.text_config.hidden_size)
        self.post_init()

    @property
    def logit_scale(self) -> nn.Parameter:
        """The model's learned log temperature (the training loop clamps it after each step)."""
        return self.onelip.logit_scale

    @returns_tuple_when_asked
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        return_loss: bool | None = None,
        trim_top_k: int | None = None,
        trim_alpha: float = 0.5,
        trim_rank: int = 8,
        trim_decomposition: str = "auto",
        **kwargs,
    ) -> OneLIPForPreTrainingOutput:
        r"""
        `OneLIPModel`'s outputs and TRIM-Refine's Z_agg (Eq. 6) over the long encoder's token states that TRIM-Select
        (Eq. 4-5) keeps, or over every valid token without `trim_top_k`. The `trim_*` options are the training
        task's (`OneLIPTask`; `hf_longclip.objectives.onelip.OneLIPLoss.token_selection` gives them).

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, as the model's processor gives them (each text with its end-of-text token).
            pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, height, width)`):
                The images, as the model's processor normalises them.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                The positions the rotary embeddings rotate each token by (defaults to 0, 1, ...).
            return_loss (`bool`, *optional*):
                Whether to return CLIP's symmetric InfoNCE over this batch, as `OneLIPModel` does.
            trim_top_k (`int`, *optional*):
                K of TRIM-Select: the number of token states TRIM-Refine attends over, those of the highest
                S(i) = (1 - alpha) I(i) + alpha A(i) (Eq. 5; `select_tokens`), in text order. None: every valid token.
            trim_alpha (`float`, *optional*, defaults to 0.5):
                alpha of Eq. 5, the weight of the cross-modal relevance A(i) against the structural importance I(i).
            trim_rank (`int`, *optional*, defaults to 8):
                r of Eq. 4, the number of singular directions of I(i).
            trim_decomposition (`str`, *optional*, defaults to `"auto"`):
                How the top r singular directions are found (`top_right_singular_vectors`): `"exact"`, `"subspace"`
                or `"auto"`.

        Returns:
            [`OneLIPForPreTrainingOutput`] (a tuple with `return_dict=False`).
        """
        outputs = self.onelip(input_ids=input_ids, pixel_values=pixel_values, attention_mask=attention_mask,
                              position_ids=position_ids, return_loss=return_loss, **kwargs)
        states = outputs.text_model_output.last_hidden_state
        valid = text_token_mask(input_ids, attention_mask, self.config.text_config.eos_token_id)
        if trim_top_k is None:
            selected, kept = states, valid
        else:
            with torch.no_grad():
                token_embeds = self.onelip.text_projection(states)
            selected, kept = select_tokens(states, token_embeds, outputs.image_embeds, valid, trim_top_k, trim_alpha,
                                           trim_rank, trim_decomposition)
        return OneLIPForPreTrainingOutput(**outputs, refined_text_states=self.trim_refine(selected, kept))


__all__ = ["OneLIPForPreTraining", "OneLIPForPreTrainingOutput", "OneLIPModel", "OneLIPTextModel", "TRIMRefine",
           "select_tokens", "text_token_mask"]
