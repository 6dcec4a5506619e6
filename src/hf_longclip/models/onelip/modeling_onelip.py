"""OneLIP (Pan et al., "Unlocking and Improving Long-Text Representations of CLIP via One-Stage Adaptation").

A dual encoder: CLIP's vision tower and a long text encoder, CLIP's text encoder with its absolute position table
removed and rotary embeddings (Eq. 2) with NTK-scaled frequencies (Sec. 4.1) on the queries and keys of every
self-attention layer. Retrieval embeddings are CLIP's: the projected image [CLS] and end-of-text embeddings, the
text one independent of any image. Training is Eq. 10 (`hf_longclip.objectives.onelip.OneLIPLoss`), applied by
`hf_longclip.recipes.onelip.task.OneLIPTask` to `OneLIPForPreTraining`: `OneLIPModel` plus TRIM-Refine's learnable
queries (Eq. 6), which only training uses, as transformers keeps pre-training heads apart from the base model. The
task also holds the frozen base encoder (the teacher): training state, not part of either model.
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CLIPModel, CLIPVisionModel
from transformers import PreTrainedModel as PreTrainedModel  # noqa: PLC0414 (see diffusion_text_encoder)
from transformers import initialization as init
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPooling
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.clip.modeling_clip import (
    CLIPAttention,
    CLIPEncoderLayer,
    CLIPPreTrainedModel,
    eager_attention_forward,
)
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from hf_longclip.modeling_common.dual_encoder import (
    DualEncoderMixin,
    DualEncoderOutput,
    check_input_ids,
    check_pixel_values,
    end_of_text_positions,
    load_clip_model,
)
from hf_longclip.modeling_common.positions import RotaryEmbedding, apply_rotary, ntk_inverse_frequencies
from hf_longclip.modeling_common.saving import CodeBundleMixin

from .configuration_onelip import ONELIP_TEXT_POSITIONS, OneLIPConfig, OneLIPTextConfig

DEFAULT_CLIP_CHECKPOINT = "openai/clip-vit-base-patch16"
_POSITION_TABLE = "text_model.embeddings.position_embedding.weight"


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


class OneLIPAttention(CLIPAttention):
    """CLIP's attention with queries and keys rotated by position (Eq. 2), causal as CLIP's text encoder."""

    def __init__(self, config: OneLIPTextConfig):
        super().__init__(config)
        self.is_causal = True

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, self.num_heads, self.head_dim)
        queries, keys = apply_rotary(
            self.q_proj(hidden_states).view(hidden_shape), self.k_proj(hidden_states).view(hidden_shape),
            *position_embeddings,
        )
        queries, keys = queries.transpose(1, 2), keys.transpose(1, 2)
        values = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self, queries, keys, values, attention_mask, scaling=self.scale,
            dropout=0.0 if not self.training else self.dropout, **kwargs,
        )
        attn_output = self.out_proj(attn_output.reshape(*input_shape, -1).contiguous())
        return attn_output, attn_weights


class OneLIPEncoderLayer(CLIPEncoderLayer):
    """CLIP's pre-norm block (a `GradientCheckpointingLayer`) with rotary self-attention."""

    def __init__(self, config: OneLIPTextConfig):
        super().__init__(config)
        self.self_attn = OneLIPAttention(config)


class OneLIPEncoder(nn.Module):
    def __init__(self, config: OneLIPTextConfig):
        super().__init__()
        self.layers = nn.ModuleList([OneLIPEncoderLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask, position_embeddings, **kwargs) -> BaseModelOutput:
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, position_embeddings=position_embeddings, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class TRIMRefine(nn.Module):
    """TRIM-Refine (Eq. 6): Z_agg = Attn(Q, Z', Z'), L2 learnable queries Q in single-head scaled dot-product
    attention over the tokens TRIM-Select kept (`kept` False at padding slots, masked), in the tokens' dtype
    (autocast off: the objective passes float32 states). The head of `OneLIPForPreTraining`, whose output the
    token-wise distillation (`hf_longclip.objectives.onelip.OneLIPLoss`) compares with the teacher; not used by
    inference."""

    def __init__(self, num_queries: int, dim: int):
        super().__init__()
        self.queries = nn.Parameter(torch.empty(num_queries, dim))

    def forward(self, tokens: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        queries = self.queries.to(tokens.dtype).expand(tokens.shape[0], -1, -1)
        with torch.autocast(device_type=tokens.device.type, enabled=False):
            return F.scaled_dot_product_attention(queries, tokens, tokens, attn_mask=kept[:, None, :])


class OneLIPPreTrainedModel(CLIPPreTrainedModel):
    """CLIP's initialisation and attention support, plus the parts OneLIP adds."""

    config: OneLIPConfig
    base_model_prefix = "onelip"
    _no_split_modules = ["OneLIPEncoderLayer", "CLIPEncoderLayer", "CLIPVisionEmbeddings"]

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        factor = self.config.initializer_factor
        text_config = getattr(self.config, "text_config", self.config)
        if isinstance(module, OneLIPTextEmbeddings):
            init.normal_(module.token_embedding.weight, std=factor * 0.02)
        elif isinstance(module, RotaryEmbedding):
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
        `CLIPModel`; the checkpoint's own code runs only with `trust_remote_code=True`): every weight copied but the
        text position table, which RoPE replaces; T_f is CLIP's text length, T_g = `max_length`; `config_kwargs` set
        configuration options. TRIM-Refine's queries (`OneLIPForPreTraining`) start from their init."""
        clip = load_clip_model(clip, trust_remote_code)
        state = {k: v for k, v in clip.state_dict().items() if k != _POSITION_TABLE}
        state["logit_scale"] = state["logit_scale"].reshape(1)
        text_config = clip.config.text_config.to_dict()
        base_length = clip.config.text_config.max_position_embeddings
        text_config.update(max_position_embeddings=max_length, base_length=base_length)
        config = OneLIPConfig(
            text_config=text_config,
            vision_config=clip.config.vision_config.to_dict(),
            projection_dim=clip.config.projection_dim,
            logit_scale_init_value=clip.config.logit_scale_init_value,
            **config_kwargs,
        )
        model = cls(config)
        missing, unexpected = model.base_model.load_state_dict(state, strict=False)
        unexpected = [name for name in unexpected if not name.endswith("position_ids")]
        if missing or unexpected:
            raise ValueError(f"CLIP checkpoint does not match: missing {missing}, unexpected {unexpected}")
        return model.to(clip.dtype)



class OneLIPTextModel(OneLIPPreTrainedModel):
    """The long text encoder: `last_hidden_state` (after the final LayerNorm) and `pooler_output` at the first
    end-of-text token, as CLIP's text model; any length up to `max_position_embeddings` (T_g)."""

    config: OneLIPTextConfig
    config_class = OneLIPTextConfig
    input_modalities = ("text",)
    _input_embed_layer = "token_embedding"

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

    @merge_with_config_defaults
    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
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
        mask = create_causal_mask(self.config, hidden_states, attention_mask, None)
        kwargs.pop("is_causal", None)
        hidden_states = self.encoder(
            hidden_states, mask, position_embeddings=self.rotary(position_ids), is_causal=True, **kwargs
        ).last_hidden_state
        last_hidden_state = self.final_layer_norm(hidden_states)
        pooled = last_hidden_state[torch.arange(last_hidden_state.shape[0], device=ends.device), ends]
        return BaseModelOutputWithPooling(last_hidden_state=last_hidden_state, pooler_output=pooled)


class OneLIPModel(DualEncoderMixin, OneLIPPreTrainedModel):
    """OneLIP: CLIP's vision tower, the RoPE long text encoder, CLIP's projections and logit scale (shape (1,):
    DeepSpeed rejects 0-dim parameters). `get_text_features` takes no image; `forward(return_loss=True)` returns
    CLIP's InfoNCE over the given local batch (Eq. 1 alone; Eq. 10 needs the teacher: `OneLIPTask`). Loads the
    checkpoints `OneLIPForPreTraining` saves, without TRIM-Refine's queries, which inference does not use."""

    config: OneLIPConfig
    config_class = OneLIPConfig
    _keys_to_ignore_on_load_unexpected = [r"^trim_refine\."]  # OneLIPForPreTraining's head

    def __init__(self, config: OneLIPConfig):
        super().__init__(config)
        text_config, vision_config = config.text_config, config.vision_config
        self.text_model = OneLIPTextModel._from_config(text_config)
        self.vision_model = CLIPVisionModel._from_config(vision_config)
        self.visual_projection = nn.Linear(vision_config.hidden_size, config.projection_dim, bias=False)
        self.text_projection = nn.Linear(text_config.hidden_size, config.projection_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor([config.logit_scale_init_value]))
        self.post_init()

    def diffusion_text_encoder(self, with_projection: bool = False) -> OneLIPTextModel:
        """The long text encoder alone (weights copied, eval mode), as `hf_longclip.integrations.diffusion` takes it for a
        diffusers pipeline's `text_encoder` (Sec. 4.4): `encoder(input_ids)[0]` is its per-token last hidden state.
        There is no OneLIP text model with its projection (SDXL's `text_encoder_2`): `with_projection` raises.

        A saved pipeline records this class under this module's path, and diffusers 0.42 reloads it only if the
        module has a `PreTrainedModel` attribute (it looks up its loading methods there): hence the re-export at
        the top of this file."""
        if with_projection:
            raise ValueError("OneLIP has no text encoder with projection for diffusers: use it as SDXL's first "
                             "text_encoder, with a CLIP or HiMo-CLIP as text_encoder_2")
        return copy.deepcopy(self.text_model).eval()

    @can_return_tuple
    def get_text_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None, **kwargs,
    ) -> BaseModelOutputWithPooling:
        """The long encoder's outputs; `pooler_output` is the projected end-of-text embedding (no image involved)."""
        outputs = self.text_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, return_dict=True, **kwargs
        )
        outputs.pooler_output = self.text_projection(outputs.pooler_output)
        return outputs

    @can_return_tuple
    def get_image_features(
        self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False, **kwargs
    ) -> BaseModelOutputWithPooling:
        """CLIP's vision outputs; `pooler_output` is the projected [CLS] embedding."""
        check_pixel_values(pixel_values)
        outputs = self.vision_model(
            pixel_values=pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, return_dict=True, **kwargs
        )
        outputs.pooler_output = self.visual_projection(outputs.pooler_output)
        return outputs


@dataclass
class OneLIPForPreTrainingOutput(DualEncoderOutput):
    r"""
    [`DualEncoderOutput`] plus TRIM-Refine's output.

    refined_text_states (`torch.FloatTensor` of shape `(batch_size, base_length, hidden_size)`):
        Z_agg = Attn(Q, Z', Z') (Eq. 6): the L2 = T_f learnable queries attending over the long encoder's token
        states that `select_tokens` kept (every valid token without it).
    """

    refined_text_states: torch.FloatTensor | None = None


class OneLIPForPreTraining(CodeBundleMixin, OneLIPPreTrainedModel):
    """`OneLIPModel` with the head only training uses: TRIM-Refine's L2 = T_f learnable queries (Eq. 6), what
    `OneLIPTask` trains. Its checkpoints load as `OneLIPModel` (`AutoModel`, zero-shot classification), without the
    queries; as `OneLIPForPreTraining` (`AutoModelForPreTraining`) with them, to train on."""

    config: OneLIPConfig
    config_class = OneLIPConfig

    def __init__(self, config: OneLIPConfig):
        super().__init__(config)
        self.onelip = OneLIPModel(config)
        self.trim_refine = TRIMRefine(config.text_config.base_length, config.text_config.hidden_size)
        self.post_init()

    @property
    def logit_scale(self) -> nn.Parameter:
        """The model's learned log temperature (the training loop clamps it after each step)."""
        return self.onelip.logit_scale

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also maps `AutoModel` and zero-shot classification to `OneLIPModel`, which loads these weights."""
        base = f"{type(self).__module__.split('.')[-1]}.{OneLIPModel.__name__}"
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), "AutoModel": base,
                                "AutoModelForZeroShotImageClassification": base}
        return super().save_pretrained(save_directory, *args, **kwargs)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        return_loss: bool | None = None,
        select_tokens: Callable | None = None,
        **kwargs,
    ) -> OneLIPForPreTrainingOutput:
        r"""
        return_loss (`bool`, *optional*):
            Whether to return CLIP's symmetric InfoNCE over this batch, as `OneLIPModel` does.
        select_tokens (`Callable`, *optional*):
            TRIM-Select (Eq. 4-5) as the training objective configures it
            (`hf_longclip.objectives.onelip.OneLIPLoss.select_tokens`): `select_tokens(text_states,
            token_embeds, image_embeds, valid) -> (selected_states, kept)`, from the long encoder's token states
            (B, L, d), the same projected into the joint space without gradient (B, L, P; A(i) of Eq. 5), the
            L2-normalised image embeddings (B, P) and the valid tokens (B, L); `kept` (B, K) marks the real tokens
            among the selected. None: TRIM-Refine attends over every valid token.
        """
        outputs = self.onelip(input_ids=input_ids, pixel_values=pixel_values, attention_mask=attention_mask,
                              position_ids=position_ids, return_loss=return_loss, **kwargs)
        states = outputs.text_model_output.last_hidden_state
        valid = text_token_mask(input_ids, attention_mask, self.config.text_config.eos_token_id)
        if select_tokens is None:
            selected, kept = states, valid
        else:
            with torch.no_grad():
                token_embeds = self.onelip.text_projection(states)
            selected, kept = select_tokens(states, token_embeds, outputs.image_embeds, valid)
        return OneLIPForPreTrainingOutput(**outputs, refined_text_states=self.trim_refine(selected, kept))


__all__ = ["OneLIPForPreTraining", "OneLIPForPreTrainingOutput", "OneLIPModel", "OneLIPTextModel", "TRIMRefine",
           "text_token_mask"]
