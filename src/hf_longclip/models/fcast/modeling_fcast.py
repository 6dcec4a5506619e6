"""F-CAST ("Aligning Forest and Trees in Images and Long Captions for Cross-Domain Grounding", Sec. 3).

Vision: CAST (`CASTVisionModel`); its final [CLS] token, projected, is the whole-image embedding v^coarse, and the
segment tokens of its second stage (64 segments, v^fine) are what sub-captions ground in.
Text: a hierarchical transformer (Eq. 1-3). A long caption comes as N chunks of at most 77 tokens; stage 1 (CLIP's
causal text transformer, L1 = 8 blocks) encodes every chunk of the batch independently as one packed batch and
pools each at its end-of-text token (t^sub, Eq. 1-2); a residual MLP adapter refines them; stage 2 (L2 = 4
bidirectional blocks over [CLS] and the N chunk embeddings, with learned positions) gives the long-caption
embedding t^long at [CLS] (Eq. 3).
Training: the two-level sigmoid loss `hf_longclip.objectives.fcast.FCASTLoss` (Eq. 6-8), applied by
`hf_longclip.recipes.fcast.task.FCASTTask` through the text-grounded attention pooling (FLAIR's AttnPool), which the
model owns because inference uses it too (`get_grounding`). Retrieval uses the whole level only: the image [CLS]
against t^long, both independent of the other modality.

The config's switches build the architectures of Table 2 from FLAIR to F-CAST with the same code: a ViT
(transformers' `CLIPVisionModel`, grounding in its top-layer patch tokens) instead of CAST, CLIP's flat text encoder
(stage 1 alone, the caption one chunk) instead of the hierarchical one; FLAIR's flat loss (`FLAIRLoss`) instead of
the two-level one is the task's.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from hf_longclip.modeling_common.dual_encoder import (
    DualEncoderMixin,
    DualEncoderOutput,
    check_input_ids,
    check_pixel_values,
    end_of_text_positions,
    pairwise_sigmoid_loss,
)
from hf_longclip.modeling_common.initialization import InitializesEveryModuleMixin
from hf_longclip.modeling_common.transformer import EncoderLayer, returns_tuple_when_asked, run_layers
from hf_longclip.modeling_common.transformers_compat import clip_tower, init, tower_outputs
from hf_longclip.models.cast.modeling_cast import CASTVisionModel

from .configuration_fcast import FCASTConfig, FCASTTextConfig
from .pooling import AttentionPool


@dataclass
class FCASTTextOutput(BaseModelOutputWithPooling):
    r"""
    pooler_output (`torch.FloatTensor` of shape `(batch, projection_dim)`):
        The projected long-caption embedding t^long (Eq. 3); with the flat text encoder, the first chunk's.
    last_hidden_state (`torch.FloatTensor` of shape `(batch, 1 + chunks, hidden_size)`):
        Stage 2's output over [CLS] and the chunk embeddings, after its final LayerNorm; with the flat text encoder,
        every chunk's stage-1 embedding (batch, chunks, hidden_size).
    hidden_states, attentions:
        Stage 1's, for the (batch x chunks) packed chunks, when asked for.
    sub_caption_embeds (`torch.FloatTensor` of shape `(batch, chunks, projection_dim)`):
        The projected stage-1 embedding t^sub of every chunk (Eq. 1-2), before the adapter.
    """

    sub_caption_embeds: torch.FloatTensor | None = None


@dataclass
class FCASTOutput(DualEncoderOutput):
    r"""
    [`DualEncoderOutput`] (the whole level: `logit_scale`, `logit_bias`) plus the part level's temperature and bias
    (Eq. 7), which training objectives read.

    part_logit_scale (`torch.FloatTensor` of shape `(1,)`):
        The exponentiated learned temperature of the part level.
    part_logit_bias (`torch.FloatTensor` of shape `(1,)`):
        The learned bias of the part level.
    """

    part_logit_scale: torch.FloatTensor | None = None
    part_logit_bias: torch.FloatTensor | None = None


@dataclass
class FCASTGroundingOutput(BaseModelOutputWithPooling):
    r"""
    segment_attention (`torch.FloatTensor` of shape `(batch, sub_captions, segments)`):
        The head-averaged AttnPool attention of each sub-caption over the grounding stage's segments (Eq. 6), or
        over a ViT's patches.
    pixel_attention (`torch.FloatTensor` of shape `(batch, sub_captions, height, width)`):
        The same attention as a density over the pixels: carried to the superpixels through CAST's soft assignments
        (a ViT: read at the patches), each superpixel's (patch's) share spread evenly over its pixels, so a map sums
        to one (less what falls on padding superpixels).
    """

    segment_attention: torch.FloatTensor | None = None
    pixel_attention: torch.FloatTensor | None = None


class FCASTAdapter(nn.Module):
    """Residual MLP adapter (CLIP-Adapter, Gao et al. 2024) before stage 2: x + ratio * (MLP(x) - x)."""

    def __init__(self, config: FCASTTextConfig):
        super().__init__()
        self.ratio = config.adapter_ratio
        width = config.hidden_size // config.adapter_reduction
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, width, bias=False), nn.ReLU(),
                                 nn.Linear(width, config.hidden_size, bias=False), nn.ReLU())

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return (1 - self.ratio) * hidden_states + self.ratio * self.mlp(hidden_states)


class FCASTTextStage2(nn.Module):
    """Stage 2 (Eq. 3): [CLS] and the adapted chunk embeddings plus learned positions (context N + 1), L2 of CLIP's
    pre-norm blocks without a causal mask, a final LayerNorm; returns all states (the [CLS] one first)."""

    def __init__(self, config: FCASTTextConfig):
        super().__init__()
        self.config = config
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.position_embedding = nn.Embedding(config.num_chunks + 1, config.hidden_size)
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.num_stage2_layers)])
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, chunk_embeds: torch.Tensor) -> torch.Tensor:
        cls = self.cls_token.expand(chunk_embeds.shape[0], -1, -1).to(chunk_embeds.dtype)
        hidden_states = torch.cat([cls, chunk_embeds], dim=1)
        hidden_states = hidden_states + self.position_embedding.weight[: hidden_states.shape[1]]
        return self.final_layer_norm(run_layers(self.layers, hidden_states))


def segments_to_pixels(attention: torch.Tensor, assignments, labels: torch.Tensor) -> torch.Tensor:
    """(B, Q, H, W) densities: attention (B, Q, S_g) over stage-g segments carried back to stage 0 through the soft
    assignments (B, S_l, S_l+1) of stages l < g, each segment's attention shared among its members in proportion to
    their membership (so the mass is kept), then each stage-0 region's share (`labels` (B, H, W): superpixel or patch
    id of every pixel) divided evenly among its pixels. A map sums to 1 when every stage-0 region has pixels."""
    for assignment in reversed(assignments):
        assignment = assignment.to(attention.dtype)
        shares = assignment / assignment.sum(1, keepdim=True).clamp(min=torch.finfo(attention.dtype).tiny)
        attention = attention @ shares.transpose(1, 2)
    batch, queries, regions = attention.shape
    flat = labels.flatten(1)
    area = attention.new_zeros(batch, regions).scatter_add_(1, flat, attention.new_ones(flat.shape))
    density = attention / area.clamp(min=1)[:, None]
    return density.gather(2, flat[:, None].expand(-1, queries, -1)).view(batch, queries, *labels.shape[-2:])


def patch_labels(batch: int, height: int, width: int, patch_size: int, device=None) -> torch.Tensor:
    """(B, H, W): the row-major index of the ViT patch every pixel falls in."""
    rows = torch.arange(height, device=device) // patch_size
    cols = torch.arange(width, device=device) // patch_size
    return (rows[:, None] * (width // patch_size) + cols[None]).expand(batch, -1, -1)


class FCASTPreTrainedModel(InitializesEveryModuleMixin, PreTrainedModel):
    """
    F-CAST's initialisation (`_init_weights`: CLIP's text and CAST's vision ones and F-CAST's own parts) and
    attention support. A fresh model keeps its constructors' draws for the adapter and the pooling
    (`keeps_constructor_draws_when_fresh`: the values every seed of the published figures drew); `_init_weights` gives
    weights a checkpoint lacks the same distributions.
    """

    keeps_constructor_draws_when_fresh = True

    config: FCASTConfig
    config_class = FCASTConfig
    base_model_prefix = "fcast"
    main_input_name = "input_ids"
    input_modalities = ("image", "text")
    supports_gradient_checkpointing = True
    _no_split_modules = ["CLIPEncoderLayer", "EncoderLayer", "CASTGraphPooling", "CASTEmbeddings",
                         "CLIPTextEmbeddings", "CLIPVisionEmbeddings"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module):
        """CLIP's text and CAST's vision initialisations (their own `_init_weights`), F-CAST's parts: stage 2's [CLS]
        and positions N(0, 0.02), its layers and the projections N(0, width^-1/2), the logit scales and biases of
        Sec. 4.1; the adapter and the pooling torch's defaults (`nn.Linear`'s and `nn.MultiheadAttention`'s, as in
        FLAIR's released pooling)."""
        factor = self.config.initializer_factor
        if isinstance(module, FCASTTextStage2):
            init.normal_(module.cls_token, std=0.02 * factor)
            init.normal_(module.position_embedding.weight, std=0.02 * factor)
            for layer in module.modules():
                if isinstance(layer, nn.Linear):
                    init.normal_(layer.weight, std=layer.in_features**-0.5 * factor)
                    init.zeros_(layer.bias)
                elif isinstance(layer, nn.LayerNorm):
                    init.ones_(layer.weight)
                    init.zeros_(layer.bias)
        elif isinstance(module, FCASTAdapter):
            for layer in (module.mlp[0], module.mlp[2]):
                init.kaiming_uniform_(layer.weight, a=math.sqrt(5))
        elif isinstance(module, AttentionPool):
            attention = module.attention
            for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                if getattr(attention, name) is not None:
                    init.xavier_uniform_(getattr(attention, name))
            init.zeros_(attention.in_proj_bias)
            init.kaiming_uniform_(attention.out_proj.weight, a=math.sqrt(5))
            init.zeros_(attention.out_proj.bias)
            for norm in filter(None, (module.query_norm, module.token_norm, module.value_norm)):
                init.ones_(norm.weight)
                init.zeros_(norm.bias)
        elif isinstance(module, FCASTModel):
            for projection in (module.text_projection, module.visual_projection):
                init.normal_(projection.weight, std=projection.in_features**-0.5 * factor)
            init.constant_(module.logit_scale, self.config.whole_logit_scale_init_value)
            init.constant_(module.logit_bias, self.config.whole_logit_bias_init_value)
            init.constant_(module.part_logit_scale, self.config.part_logit_scale_init_value)
            init.constant_(module.part_logit_bias, self.config.part_logit_bias_init_value)


class FCASTModel(DualEncoderMixin, FCASTPreTrainedModel):
    """
    F-CAST: CAST vision tower, hierarchical text encoder, projections to `projection_dim`, the text-grounded
    attention pooling (Eq. 6) and the learnable temperatures and biases of both levels (shape (1,): DeepSpeed
    rejects 0-dim parameters; `logit_scale`/`logit_bias` are the whole level's, used for inference logits and by
    FLAIR's loss). `forward(return_loss=True)` returns SigLIP's sigmoid loss of the whole level over the given local
    batch (Eq. 8 without gather); the two-level objective is `FCASTTask`'s.

    Texts are `input_ids` (batch, chunks, tokens) from [`FCASTProcessor`]; (batch, tokens) is taken as one chunk per
    caption (a short label, e.g. in the zero-shot pipeline). Images are `pixel_values` with `superpixels`.

    Args:
        config ([`FCASTConfig`]): the model's configuration.
    """

    def __init__(self, config: FCASTConfig):
        super().__init__(config)
        text_config, vision_config = config.text_config, config.vision_config
        self.text_model = clip_tower(text_config)
        self.text_adapter = FCASTAdapter(text_config) if text_config.is_hierarchical else None
        self.text_stage2 = FCASTTextStage2(text_config) if text_config.is_hierarchical else None
        if config.vision_backbone == "cast":
            self.vision_model = CASTVisionModel(vision_config)
        else:
            self.vision_model = clip_tower(vision_config, vision=True)
        self.text_projection = nn.Linear(text_config.hidden_size, config.projection_dim, bias=False)
        self.visual_projection = nn.Linear(vision_config.hidden_size, config.projection_dim, bias=False)
        flair_pooling = config.attention_pooling == "flair"
        self.grounding_pool = AttentionPool(
            config.projection_dim, config.pool_heads,
            config.projection_dim if flair_pooling else vision_config.hidden_size,
            value_norm=flair_pooling, zero_attention=flair_pooling,
        )
        self.logit_scale = nn.Parameter(torch.tensor([config.whole_logit_scale_init_value]))
        self.logit_bias = nn.Parameter(torch.tensor([config.whole_logit_bias_init_value]))
        self.part_logit_scale = nn.Parameter(torch.tensor([config.part_logit_scale_init_value]))
        self.part_logit_bias = nn.Parameter(torch.tensor([config.part_logit_bias_init_value]))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.text_model.embeddings.token_embedding

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.text_model.embeddings.token_embedding = value

    def _chunks(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        if input_ids.dim() == 2:
            input_ids = input_ids[:, None]
            attention_mask = None if attention_mask is None else attention_mask[:, None]
        if input_ids.dim() != 3:
            raise ValueError(f"input_ids must be (batch, chunks, tokens) as FCASTProcessor returns them, got "
                             f"{tuple(input_ids.shape)}")
        if input_ids.shape[-1] > self.config.text_config.max_position_embeddings:
            raise ValueError(f"chunks of {input_ids.shape[-1]} tokens exceed stage 1's context of "
                             f"{self.config.text_config.max_position_embeddings} tokens")
        check_input_ids(input_ids, self.config.text_config.vocab_size)
        end_of_text_positions(input_ids.flatten(0, 1), self.config.text_config.eos_token_id)  # names a missing one
        return input_ids, attention_mask

    @returns_tuple_when_asked
    def get_text_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> FCASTTextOutput:
        r"""
        Eq. 1-3: every chunk through stage 1 as one packed batch, the adapter, stage 2 over the first N chunks;
        `pooler_output` is the projected t^long, `sub_caption_embeds` the projected t^sub of every chunk. The flat
        text encoder stops after stage 1: its `pooler_output` is the first chunk's (the caption itself, N = 1).

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, num_chunks, sequence_length)`):
                Each caption's chunks, as [`FCASTProcessor`] gives them; `(batch_size, sequence_length)` is one chunk
                per caption.
            attention_mask (`torch.Tensor` of the same shape, *optional*):
                1 for real tokens, 0 for padding.
            position_ids (`torch.LongTensor`, *optional*):
                Stage 1's token positions (defaults to 0, 1, ...).

        Returns:
            [`FCASTTextOutput`] (a tuple with `return_dict=False`).
        """
        input_ids, attention_mask = self._chunks(input_ids, attention_mask)
        batch, chunks, length = input_ids.shape
        stage1 = tower_outputs(
            self.text_model, input_ids=input_ids.reshape(-1, length), position_ids=position_ids,
            attention_mask=None if attention_mask is None else attention_mask.reshape(-1, length), **kwargs,
        )
        sub = stage1.pooler_output.view(batch, chunks, -1)
        if self.text_stage2 is None:
            states, long = sub, sub[:, 0]
        else:
            states = self.text_stage2(self.text_adapter(sub[:, : self.config.text_config.num_chunks]))
            long = states[:, 0]
        return FCASTTextOutput(last_hidden_state=states, pooler_output=self.text_projection(long),
                               sub_caption_embeds=self.text_projection(sub), hidden_states=stage1.hidden_states,
                               attentions=stage1.attentions)

    @returns_tuple_when_asked
    def get_image_features(
        self,
        pixel_values: torch.Tensor,
        superpixels: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        CAST's outputs (segment tokens, assignments, masks; a ViT's token states, `superpixels` unused);
        `pooler_output` is the projected final [CLS] (v^coarse).

        Args:
            pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, height, width)`):
                The images, as [`FCASTProcessor`] normalises them.
            superpixels (`torch.LongTensor` of shape `(batch_size, height, width)`, *optional*):
                Superpixel id of every pixel, from [`FCASTProcessor`] (needed by CAST, unused by a ViT).

        Returns:
            [`~models.cast.modeling_cast.CASTVisionOutput`] (CAST) or
            [`~modeling_outputs.BaseModelOutputWithPooling`] (a ViT); a tuple with `return_dict=False`.
        """
        check_pixel_values(pixel_values)
        if self.config.vision_backbone == "vit":
            outputs = tower_outputs(self.vision_model, pixel_values=pixel_values, **kwargs)
        else:
            kwargs.pop("interpolate_pos_encoding", None)  # CAST takes any image size
            outputs = tower_outputs(self.vision_model, pixel_values=pixel_values, superpixels=superpixels, **kwargs)
        outputs.pooler_output = self.visual_projection(outputs.pooler_output)
        return outputs

    def grounding_tokens(self, vision_outputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The tokens sub-captions ground in and their padding: CAST's segments of `grounding_stage`, or a ViT's
        top-layer patch tokens (no padding); with FLAIR's pooling, after the final LayerNorm and projection."""
        if self.config.vision_backbone == "vit":
            tokens, padding = vision_outputs.last_hidden_state[:, 1:], None
        else:
            stage = self.config.grounding_stage
            tokens, padding = vision_outputs.segment_tokens[stage], vision_outputs.segment_masks[stage] == 0
        if self.config.attention_pooling == "flair":
            tokens = self.visual_projection(self.vision_model.post_layernorm(tokens))
        return tokens, padding

    @torch.no_grad()
    def get_grounding(self, pixel_values: torch.Tensor, superpixels: torch.Tensor, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None = None) -> FCASTGroundingOutput:
        """Where each sub-caption grounds in its image (Sec. 4.3, Fig. 7): `input_ids` (batch, sub-captions, tokens)
        hold sub-captions of image i in row i; returns the AttnPool attention over the segments of the grounding
        stage (a ViT's patches) and over the pixels, and the text-grounded features (`pooler_output`, (batch,
        sub-captions, D)). A ViT needs no `superpixels` (None)."""
        input_ids, attention_mask = self._chunks(input_ids, attention_mask)
        batch, subs, length = input_ids.shape
        stage1 = tower_outputs(self.text_model, input_ids=input_ids.reshape(-1, length),
                               attention_mask=None if attention_mask is None else attention_mask.reshape(-1, length))
        queries = self.text_projection(stage1.pooler_output).view(batch, subs, -1)
        vision = self.get_image_features(pixel_values, superpixels)
        pooled, attention = self.grounding_pool(queries, *self.grounding_tokens(vision))
        if self.config.vision_backbone == "vit":
            assignments, labels = [], patch_labels(batch, *pixel_values.shape[-2:],
                                                   self.config.vision_config.patch_size, pixel_values.device)
        else:
            assignments, labels = vision.assignments[: self.config.grounding_stage], superpixels
        pixels = segments_to_pixels(attention, assignments, labels)
        return FCASTGroundingOutput(pooler_output=pooled, segment_attention=attention, pixel_attention=pixels)

    @returns_tuple_when_asked
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.FloatTensor | None = None,
        superpixels: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        return_loss: bool | None = None,
        **kwargs,
    ) -> FCASTOutput:
        r"""
        Both towers on a batch of captions and images: the whole level's embeddings (t^long and v^coarse,
        L2-normalised), its scaled and biased logits, and the part level's scale and bias.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, num_chunks, sequence_length)`):
                Each caption's chunks, as [`FCASTProcessor`] gives them; `(batch_size, sequence_length)` is one chunk
                per caption.
            pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, height, width)`):
                The images, as [`FCASTProcessor`] normalises them.
            superpixels (`torch.LongTensor` of shape `(batch, height, width)`):
                Superpixel ids of every pixel, from [`FCASTProcessor`] (CAST's image processor).
            attention_mask (`torch.Tensor` of the same shape as `input_ids`, *optional*):
                1 for real tokens, 0 for padding.
            position_ids (`torch.LongTensor`, *optional*):
                Stage 1's token positions (defaults to 0, 1, ...).
            return_loss (`bool`, *optional*):
                Whether to return the whole level's sigmoid loss over this batch (Eq. 8, image i matching caption i,
                no gather).

        Returns:
            [`FCASTOutput`] (a tuple with `return_dict=False`).
        """
        if input_ids is None or pixel_values is None:
            raise ValueError("F-CAST's forward needs both input_ids and pixel_values (with superpixels)")
        vision_outputs, text_outputs, image_embeds, text_embeds = self.encode_pair(
            input_ids, pixel_values, attention_mask, position_ids, {"superpixels": superpixels}, **kwargs
        )
        return self.pair_output(vision_outputs, text_outputs, image_embeds, text_embeds, return_loss)

    def pair_output(self, vision_outputs, text_outputs, image_embeds, text_embeds, return_loss=False) -> FCASTOutput:
        """`DualEncoderMixin.pair_output` (the whole level's scaled and biased logits) with the part level's
        temperature and bias."""
        output = super().pair_output(vision_outputs, text_outputs, image_embeds, text_embeds, return_loss)
        return FCASTOutput(**output, part_logit_scale=self.part_logit_scale.exp(),
                           part_logit_bias=self.part_logit_bias.clone())  # a copy: ZeRO-3 may release it

    def pair_loss(self, logits_per_text: torch.Tensor) -> torch.Tensor:
        """The whole level's sigmoid loss over the local batch (Eq. 8 without gather), image i matching caption i."""
        texts, images = logits_per_text.shape
        if images != texts:
            raise ValueError(f"the loss pairs image i with caption i: got {images} images and {texts} captions")
        return pairwise_sigmoid_loss(logits_per_text.T)


__all__ = ["FCASTGroundingOutput", "FCASTModel", "FCASTOutput", "FCASTPreTrainedModel", "FCASTTextOutput",
           "patch_labels", "segments_to_pixels"]
