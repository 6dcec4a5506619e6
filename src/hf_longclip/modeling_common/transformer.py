"""CLIP's pre-norm transformer block, written once for the models whose blocks are not inside a transformers CLIP
(OneLIP's rotary text encoder, CAST's stages and grouping, F-CAST's stage 2), and the plumbing of their forward
passes: the outputs a caller asks for, tuples on request, tracing checks. transformers' own versions of these
(`CLIPEncoderLayer`, `masking_utils`, `capture_outputs`, `can_return_tuple`) changed their signatures between 4.57 and
5.x; these do not, so a checkpoint's code computes the same on every release.

The parameters are CLIP's, under CLIP's names and built in CLIP's order (`self_attn.{k,v,q,out}_proj`,
`layer_norm1`, `mlp.fc1`, `mlp.fc2`, `layer_norm2`): checkpoints and seeds are those of `CLIPEncoderLayer`.
Attention is PyTorch's SDPA, called as transformers 5 calls it (no mask where nothing is masked, SDPA's causal
flag; else a boolean mask, True where attended); the explicit softmax runs only when the weights are asked for.
"""

import functools

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer


def is_tracing(tensor: torch.Tensor | None = None) -> bool:
    """Whether a graph is being traced (torch.compile, torch.export, torch.jit, torch.fx, fake tensors): where a
    check must not read a value on the host."""
    tracing = torch.compiler.is_compiling() or torch.jit.is_tracing() or (
        torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    if tensor is not None:
        tracing = tracing or isinstance(tensor, (torch.fx.Proxy, torch._subclasses.FakeTensor))
    return tracing


def returns_tuple_when_asked(forward):
    """A forward returning a `ModelOutput` gives `output.to_tuple()` when called with `return_dict=False`, or when
    the configuration's `return_dict` is False (transformers' convention)."""

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        return_dict = kwargs.pop("return_dict", None)
        if return_dict is None:
            return_dict = getattr(self.config, "return_dict", True)
        output = forward(self, *args, **kwargs)
        return output if return_dict or isinstance(output, tuple) else output.to_tuple()

    return wrapper


def asked_outputs(config, kwargs: dict) -> tuple[bool, bool | list[int]]:
    """(output_attentions, output_hidden_states): the call's `kwargs` (popped), else the configuration's. Hidden
    states may be asked for by index (an int or a list of them, negative ones from the end: transformers 5's
    `output_hidden_states=[0, -1]`), the others then given as None."""
    attentions = kwargs.pop("output_attentions", None)
    hidden_states = kwargs.pop("output_hidden_states", None)
    if hidden_states is None:
        hidden_states = getattr(config, "output_hidden_states", False)
    if isinstance(hidden_states, int) and not isinstance(hidden_states, bool):
        hidden_states = [hidden_states]
    return (bool(getattr(config, "output_attentions", False) if attentions is None else attentions),
            list(hidden_states) if isinstance(hidden_states, (list, tuple)) else bool(hidden_states))


def attention_mask_for(keep: torch.Tensor | None, length: int, causal: bool) -> torch.Tensor | None:
    """The mask SDPA gets for `keep` ((batch, length), nonzero at the tokens attended to; None: all): None where
    nothing is masked (SDPA's causal flag then does the causal part), else a (batch, 1, length, length) boolean mask,
    True where attended. While tracing, a mask is always built (its values are unknown)."""
    if keep is None or (not is_tracing(keep) and bool(keep.all())):
        return None
    mask = keep.bool()[:, None, None, :].expand(-1, 1, length, -1)
    if causal:
        mask = mask & torch.ones(length, length, dtype=torch.bool, device=keep.device).tril()
    return mask


class SelfAttention(nn.Module):
    """CLIP's multi-head self-attention. `rotary` (cos, sin) rotates the queries and keys first (OneLIP's Eq. 2);
    `is_causal` makes it causal where no mask is given."""

    def __init__(self, config, is_causal: bool = False):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        if self.head_dim * self.num_heads != self.embed_dim:
            raise ValueError(f"hidden_size ({self.embed_dim}) must be divisible by num_attention_heads "
                             f"({self.num_heads})")
        self.scale = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
                output_attentions: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`attention_mask` from `attention_mask_for`; returns the output and, when asked, the weights."""
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        queries, keys = self.q_proj(hidden_states).view(hidden_shape), self.k_proj(hidden_states).view(hidden_shape)
        if rotary is not None:
            queries, keys = apply_rotary(queries, keys, *rotary)
        queries, keys = queries.transpose(1, 2), keys.transpose(1, 2)
        values = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        length = queries.shape[2]
        if output_attentions:
            weights = (queries @ keys.transpose(2, 3)) * self.scale
            if attention_mask is None and self.is_causal:
                attention_mask = torch.ones(length, length, dtype=torch.bool, device=queries.device).tril()
            if attention_mask is not None:
                weights = weights.masked_fill(~attention_mask, torch.finfo(weights.dtype).min)
            weights = F.dropout(F.softmax(weights, dim=-1, dtype=torch.float32).to(queries.dtype), p=dropout,
                                training=self.training)
            output = weights @ values
        else:
            weights = None
            output = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=attention_mask, dropout_p=dropout, scale=self.scale,
                is_causal=length > 1 and attention_mask is None and self.is_causal)
        output = output.transpose(1, 2).contiguous().reshape(*input_shape, -1).contiguous()
        return self.out_proj(output), weights


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the last dimension's halves (RoFormer's rotation, half-split convention)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotate (batch, length, heads, head_dim) queries and keys by position (RoFormer; OneLIP Eq. 2); `cos` and `sin`
    are (batch, length, head_dim), from `positions.RotaryEmbedding`. Rotating the projections' own layout, before the
    heads are moved forward, keeps the element-wise work on contiguous memory."""
    cos, sin = cos.to(query.dtype)[:, :, None], sin.to(query.dtype)[:, :, None]
    return query * cos + rotate_half(query) * sin, key * cos + rotate_half(key) * sin


class MLP(nn.Module):
    """CLIP's feed-forward block: fc1, the configuration's activation, fc2."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.activation_fn = ACT2FN[config.hidden_act]
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_fn(self.fc1(hidden_states)))


class EncoderLayer(GradientCheckpointingLayer):
    """CLIP's pre-norm block: x + attention(LN(x)), then x + MLP(LN(x)). Returns the states and, when asked, the
    attention weights."""

    def __init__(self, config, is_causal: bool = False):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.self_attn = SelfAttention(config, is_causal)
        self.layer_norm1 = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_eps)
        self.mlp = MLP(config)
        self.layer_norm2 = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
                output_attentions: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(self.layer_norm1(hidden_states), attention_mask, rotary, output_attentions)
        hidden_states = hidden_states + attended
        return hidden_states + self.mlp(self.layer_norm2(hidden_states)), weights


class Recorder:
    """What `run_layers` records for the output flags of `asked_outputs`: the input of the first layer and every
    layer's output (`hidden_states`), every layer's attention weights (`attentions`), transformers' convention."""

    def __init__(self, output_attentions: bool = False, output_hidden_states: bool | list[int] = False):
        self.selection = output_hidden_states
        self.hidden_states = [] if output_hidden_states else None
        self.attentions = [] if output_attentions else None

    def outputs(self) -> dict:
        """`hidden_states` and `attentions` as a `ModelOutput` holds them: tuples or None; hidden states not asked for
        by index are None."""
        hidden_states = self.hidden_states
        if hidden_states is not None and isinstance(self.selection, list):
            count = len(hidden_states)
            kept = {index % count for index in self.selection if -count <= index < count}
            hidden_states = [state if index in kept else None for index, state in enumerate(hidden_states)]
        return {"hidden_states": None if hidden_states is None else tuple(hidden_states),
                "attentions": None if self.attentions is None else tuple(self.attentions)}


def run_layers(layers, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
               rotary: tuple[torch.Tensor, torch.Tensor] | None = None, recorder: Recorder | None = None
               ) -> torch.Tensor:
    """`hidden_states` through `layers`, recording into `recorder` what it was asked for."""
    recorder = recorder or Recorder()
    for layer in layers:
        if recorder.hidden_states == []:
            recorder.hidden_states.append(hidden_states)
        hidden_states, weights = layer(hidden_states, attention_mask, rotary, recorder.attentions is not None)
        if recorder.hidden_states is not None:
            recorder.hidden_states.append(hidden_states)
        if recorder.attentions is not None:
            recorder.attentions.append(weights)
    return hidden_states


__all__ = ["MLP", "EncoderLayer", "Recorder", "SelfAttention", "apply_rotary", "asked_outputs", "attention_mask_for",
           "is_tracing", "returns_tuple_when_asked", "rotate_half", "run_layers"]
