"""CAST vision encoder (Ke et al. 2022), the vision tower of F-CAST (Sec. 3.1, App. B).

Superpixel tokens: a convolutional stem (stride 8) gives grid features; each superpixel's token is the mean of the
features (plus 2-D sin-cos position features) over its pixels. With a [CLS] token they run through transformer
blocks in stages; between stages, graph pooling merges the segment tokens into fewer, coarser ones (196 -> 64 ->
32 -> 16 by default): seeds chosen by farthest point sampling, a soft assignment softmax(5 cos(token, seed)) of every
token to the seeds, and new tokens from the assignment-weighted mean of an MLP of the tokens plus the seed's own
token. The assignments compose into a fine-to-coarse segmentation of the image.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from hf_longclip.modeling_common.initialization import InitializesEveryModuleMixin
from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.transformer import (
    EncoderLayer,
    Recorder,
    SelfAttention,
    asked_outputs,
    attention_mask_for,
    returns_tuple_when_asked,
    run_layers,
)
from hf_longclip.modeling_common.transformers_compat import init

from .configuration_cast import STEM_STRIDE, CASTVisionConfig
from .segments import (
    cosine_soft_assignment,
    farthest_point_sampling,
    segment_pooling_weights,
    sincos_2d_positions,
)


@dataclass
class CASTVisionOutput(BaseModelOutputWithPooling):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, 1 + num_clusters[-1], hidden_size)`):
        [CLS] and the coarsest segment tokens after the final LayerNorm.
    pooler_output (`torch.FloatTensor` of shape `(batch, hidden_size)`):
        The final [CLS] token (F-CAST's v^coarse).
    segment_tokens (`tuple(torch.FloatTensor)`):
        Each stage's segment tokens after its blocks, `(batch, n_stage, hidden_size)` with n_stage = num_segments,
        then each of num_clusters (F-CAST's v^fine is the second).
    segment_masks (`tuple(torch.LongTensor)`):
        `(batch, n_stage)` per stage, 1 at segment tokens and 0 at padding (superpixel ids without pixels, and coarse
        segments beyond the number of valid fine ones), as transformers' attention masks.
    assignments (`tuple(torch.FloatTensor)`):
        `(batch, n_stage, n_next)` soft assignment of each stage's segments to the next stage's; rows of valid
        segments sum to one (with `empty_segments="zero_tokens"` also those of the zero tokens), padding rows and
        columns are zero.
    seed_indices (`tuple(torch.LongTensor)`):
        `(batch, n_next)` index of each next-stage segment's seed among the stage's segments.
    """

    segment_tokens: tuple[torch.FloatTensor, ...] | None = None
    segment_masks: tuple[torch.LongTensor, ...] | None = None
    assignments: tuple[torch.FloatTensor, ...] | None = None
    seed_indices: tuple[torch.LongTensor, ...] | None = None


class CASTStem(nn.Module):
    """CAST's convolutional stem (Xiao et al. 2021's early convolutions): three 3x3 stride-2 and one 3x3 stride-1
    convolutions with BatchNorm and ReLU, widths C/8, C/4, C/2, C, then a 1x1 convolution to C; stride 8."""

    def __init__(self, config: CASTVisionConfig):
        super().__init__()
        layers, channels = [], config.num_channels
        for index in range(4):
            width = config.hidden_size // 8 * 2**index
            layers += [nn.Conv2d(channels, width, 3, stride=2 if index < 3 else 1, padding=1, bias=False),
                       nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            channels = width
        layers.append(nn.Conv2d(channels, config.hidden_size, 1))
        self.layers = nn.Sequential(*layers)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.layers(pixel_values)


class CASTEmbeddings(nn.Module):
    """Superpixel tokens: the mean over each segment's pixels of the stem features plus their positions (fixed
    sin-cos, or a learned table), after a [CLS] token; returns the tokens (B, 1 + num_segments, C) and which
    segments exist (B, num_segments)."""

    def __init__(self, config: CASTVisionConfig):
        super().__init__()
        self.num_segments = config.num_segments
        self.position_layout, self.per_cell = config.position_layout, config.segment_pooling == "cells"
        self.stem = CASTStem(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.grid = config.image_size // STEM_STRIDE
        self.position_embedding = (nn.Parameter(torch.zeros(self.grid**2, config.hidden_size))
                                   if config.position_embedding_type == "learned" else None)

    def forward(self, pixel_values: torch.Tensor, superpixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.stem(pixel_values)
        batch, channels, grid_h, grid_w = features.shape
        if self.position_embedding is None:
            positions = sincos_2d_positions(grid_h, grid_w, channels, device=features.device,
                                            layout=self.position_layout)
        elif (grid_h, grid_w) != (self.grid, self.grid):
            raise ValueError(f"learned positions hold a {self.grid}x{self.grid} grid (image_size "
                             f"{self.grid * STEM_STRIDE} px); images of {grid_h * STEM_STRIDE}x"
                             f"{grid_w * STEM_STRIDE} px give {grid_h}x{grid_w}")
        else:
            positions = self.position_embedding
        features = features.flatten(2).transpose(1, 2) + positions.to(features.dtype)
        weights, valid = segment_pooling_weights(superpixels, self.num_segments, (grid_h, grid_w), STEM_STRIDE,
                                                 self.per_cell)
        tokens = weights.to(features.dtype) @ features
        return torch.cat([self.cls_token.expand(batch, -1, -1).to(tokens.dtype), tokens], dim=1), valid


class CASTStage(nn.Module):
    """Transformer blocks (CLIP's pre-norm layer, `modeling_common.transformer.EncoderLayer`) over [CLS] and segment
    tokens; padding tokens are masked out as keys."""

    def __init__(self, config: CASTVisionConfig, depth: int):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(depth)])

    def forward(self, hidden_states: torch.Tensor, valid: torch.Tensor, recorder: Recorder | None = None
                ) -> torch.Tensor:
        keep = torch.cat([valid.new_ones(valid.shape[0], 1), valid], dim=1)
        mask = attention_mask_for(keep, keep.shape[1], causal=False)
        return run_layers(self.layers, hidden_states, mask, recorder=recorder)


class CASTGroupingBlock(nn.Module):
    """The features graph pooling compares (CAST's `centroid_fc`): one pre-norm self-attention with residual, then
    the valid tokens' mean subtracted and a learned bias added."""

    def __init__(self, config: CASTVisionConfig):
        super().__init__()
        self.config = config
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = SelfAttention(config)
        self.bias = nn.Parameter(torch.zeros(config.hidden_size))

    def forward(self, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        mask = attention_mask_for(valid, valid.shape[1], causal=False)
        tokens = tokens + self.attention(self.layer_norm(tokens), mask)[0]
        weights = valid.to(tokens.dtype)[..., None]
        mean = (tokens * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp_min(1)
        return tokens - mean + self.bias


class CASTGraphPooling(nn.Module):
    """CAST's graph pooling from N segment tokens to K: seeds by farthest point sampling of the tokens, soft
    assignment A = softmax_k(scale * cos(g_n, g_seed_k)) of the grouping features g, and coarse tokens
    fc2(sum_n A_nk fc1(x_n) / sum_n A_nk) + x_seed_k; the [CLS] token becomes fc2(fc1(cls)) + cls."""

    def __init__(self, config: CASTVisionConfig, num_clusters: int):
        super().__init__()
        self.num_clusters, self.scale = num_clusters, config.assignment_scale
        self.grouping = CASTGroupingBlock(config)
        self.fc1 = nn.Sequential(nn.LayerNorm(config.hidden_size, eps=config.pooling_layer_norm_eps),
                                 nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                 nn.Dropout(config.dropout))
        self.fc2 = nn.Sequential(nn.LayerNorm(config.intermediate_size, eps=config.pooling_layer_norm_eps),
                                 nn.Linear(config.intermediate_size, config.hidden_size))

    def forward(self, cls_token: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor,
                present: torch.Tensor | None = None):
        """Seeds are drawn from the `valid` tokens; the `present` ones (by default the valid ones; with
        `empty_segments="zero_tokens"` also the zero tokens of empty ids) are grouped and assigned."""
        present = valid if present is None else present
        with torch.no_grad():
            seeds = farthest_point_sampling(tokens.detach(), self.num_clusters, valid)
        seed_valid = torch.arange(self.num_clusters, device=valid.device) < valid.sum(1, keepdim=True)
        nodes = self.grouping(tokens, present)
        seed_index = seeds[..., None].expand(-1, -1, tokens.shape[-1])
        assignment = cosine_soft_assignment(nodes, nodes.gather(1, seed_index), self.scale, present, seed_valid)
        hidden = self.fc1(torch.cat([cls_token, tokens], dim=1))
        mass = assignment.sum(1)[..., None]
        centroids = assignment.transpose(1, 2).to(hidden.dtype) @ hidden[:, 1:] / mass.clamp_min(1e-6).to(hidden.dtype)
        out = self.fc2(torch.cat([hidden[:, :1], centroids], dim=1))
        return out[:, :1] + cls_token, out[:, 1:] + tokens.gather(1, seed_index), assignment, seed_valid, seeds


def batch_padded_segments(valid: torch.Tensor) -> torch.Tensor:
    """(B, N) True at every id up to the largest id that owns pixels in any image of the batch: the tokens released
    CAST's `segment_mean_nd` gives each image (empty ids among them as zero tokens), computed without host
    synchronisation."""
    ids = torch.arange(valid.shape[1], device=valid.device)
    last = torch.where(valid.any(0), ids, -1).amax()
    return (ids <= last).expand_as(valid)


class CASTPreTrainedModel(InitializesEveryModuleMixin, CodeBundleMixin, PreTrainedModel):
    """
    CAST's initialisation (`_init_weights`), attention support and the outputs it can record (hidden states and
    attentions of the transformer blocks).
    """

    config: CASTVisionConfig
    config_class = CASTVisionConfig
    base_model_prefix = "cast"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["EncoderLayer", "CASTGraphPooling", "CASTEmbeddings"]
    _supports_sdpa = True  # PyTorch's SDPA (`modeling_common.transformer`); flash and flex attention are not offered

    @torch.no_grad()
    def _init_weights(self, module):
        """CAST's initialisation: xavier-uniform linear layers with zero bias, kaiming convolutions, unit norms,
        the grouping bias N(0, 0.01), the [CLS] token N(0, initializer_range)."""
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Conv2d):
            init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (nn.LayerNorm, nn.BatchNorm2d)):
            init.ones_(module.weight)
            init.zeros_(module.bias)
            if isinstance(module, nn.BatchNorm2d):
                init.zeros_(module.running_mean)
                init.ones_(module.running_var)
                init.zeros_(module.num_batches_tracked)
        elif isinstance(module, CASTGroupingBlock):
            init.normal_(module.bias, std=0.01)
        elif isinstance(module, CASTEmbeddings):
            init.normal_(module.cls_token, std=self.config.initializer_range)
            if module.position_embedding is not None:
                init.trunc_normal_(module.position_embedding, std=0.02)  # DeiT's


class CASTVisionModel(CASTPreTrainedModel):
    """
    CAST: superpixel tokens and [CLS] through `len(depths)` stages of transformer blocks with graph pooling between
    them. `pooler_output` is the final [CLS] token after the LayerNorm; every stage's segment tokens, the assignment
    matrices between stages and the padding masks come with the output (see [`CASTVisionOutput`]).

    `superpixels` (B, H, W) are the image processor's label maps, ids in [0, num_segments) (ids without pixels are
    padding); an id outside that range is an error (ValueError on CPU; on an accelerator a device-side assertion,
    which costs no synchronisation).

    Args:
        config ([`CASTVisionConfig`]): the model's configuration.
    """

    def __init__(self, config: CASTVisionConfig):
        super().__init__(config)
        self.embeddings = CASTEmbeddings(config)
        self.stages = nn.ModuleList([CASTStage(config, depth) for depth in config.depths])
        self.pools = nn.ModuleList([CASTGraphPooling(config, clusters) for clusters in config.num_clusters])
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.stem

    def _check_inputs(self, pixel_values: torch.Tensor, superpixels: torch.Tensor | None) -> None:
        if superpixels is None:
            raise ValueError("CAST needs `superpixels`, the (batch, height, width) label maps CASTImageProcessor "
                             "returns with `pixel_values`")
        if pixel_values.dim() != 4 or pixel_values.shape[1] != self.config.num_channels:
            raise ValueError(f"pixel_values must be (batch, {self.config.num_channels}, height, width), got "
                             f"{tuple(pixel_values.shape)}")
        if min(pixel_values.shape[-2:]) < STEM_STRIDE:
            raise ValueError(f"images of {tuple(pixel_values.shape[-2:])} px are smaller than the stem stride "
                             f"({STEM_STRIDE} px)")
        if superpixels.shape != (pixel_values.shape[0], *pixel_values.shape[-2:]):
            expected = (pixel_values.shape[0], *pixel_values.shape[-2:])
            raise ValueError(f"superpixels must be (batch, height, width) = {expected} like pixel_values, got "
                             f"{tuple(superpixels.shape)}")
        if not pixel_values.is_floating_point():
            raise TypeError(f"pixel_values must be floating point, normalised by CASTImageProcessor; got "
                            f"{pixel_values.dtype}")
        if superpixels.is_floating_point() or superpixels.is_complex() or superpixels.dtype == torch.bool:
            raise ValueError(f"superpixels must hold integer segment ids, got {superpixels.dtype}")
        in_range = (superpixels.min() >= 0) & (superpixels.max() < self.config.num_segments)
        message = (f"superpixel ids must lie in [0, num_segments = {self.config.num_segments}): the image "
                   f"processor's num_segments must not exceed the model's")
        if superpixels.device.type != "cpu":
            torch._assert_async(in_range, message)
        elif not torch.compiler.is_compiling() and not in_range:
            raise ValueError(message)

    @returns_tuple_when_asked
    def forward(
        self,
        pixel_values: torch.FloatTensor | None = None,
        superpixels: torch.LongTensor | None = None,
        **kwargs,
    ) -> CASTVisionOutput:
        r"""
        The image's [CLS] and segment tokens through the stages, and the segmentation they compose.

        Args:
            pixel_values (`torch.FloatTensor` of shape `(batch, num_channels, height, width)`):
                The images, as [`CASTImageProcessor`] normalises them.
            superpixels (`torch.LongTensor` of shape `(batch, height, width)`):
                Superpixel id of every pixel, from [`CASTImageProcessor`].

        Returns:
            [`CASTVisionOutput`] (a tuple with `return_dict=False`).
        """
        if pixel_values is None:
            raise ValueError("You have to specify pixel_values")
        self._check_inputs(pixel_values, superpixels)
        recorder = Recorder(*asked_outputs(self.config, kwargs))
        hidden_states, valid = self.embeddings(pixel_values, superpixels)
        present = valid if self.config.empty_segments == "masked" else batch_padded_segments(valid)
        segment_tokens, masks, assignments, seeds = [], [valid], [], []
        for index, stage in enumerate(self.stages):
            hidden_states = stage(hidden_states, present, recorder)
            segment_tokens.append(hidden_states[:, 1:])
            if index < len(self.pools):
                cls_token, tokens, assignment, valid, seed = self.pools[index](
                    hidden_states[:, :1], hidden_states[:, 1:], valid, present)
                present = valid
                hidden_states = torch.cat([cls_token, tokens], dim=1)
                assignments.append(assignment)
                masks.append(valid)
                seeds.append(seed)
        last_hidden_state = self.post_layernorm(hidden_states)
        return CASTVisionOutput(
            last_hidden_state=last_hidden_state, pooler_output=last_hidden_state[:, 0],
            segment_tokens=tuple(segment_tokens), segment_masks=tuple(mask.long() for mask in masks),
            assignments=tuple(assignments), seed_indices=tuple(seeds), **recorder.outputs(),
        )


class CASTForImageClassification(CASTPreTrainedModel):
    """
    CAST with a linear classifier on the final [CLS] token (CAST's supervised setting); `labels` give the
    cross-entropy loss. Its checkpoints also load with `AutoModel`, which gives the backbone ([`CASTVisionModel`],
    under `cast.`).

    Args:
        config ([`CASTVisionConfig`]): the model's configuration (`num_labels` classes).
    """

    def __init__(self, config: CASTVisionConfig):
        super().__init__(config)
        self.cast = CASTVisionModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels else nn.Identity()
        self.post_init()

    @returns_tuple_when_asked
    def forward(
        self,
        pixel_values: torch.FloatTensor | None = None,
        superpixels: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> ImageClassifierOutput:
        r"""
        Class logits of the images' final [CLS] token.

        Args:
            pixel_values (`torch.FloatTensor` of shape `(batch, num_channels, height, width)`):
                The images, as [`CASTImageProcessor`] normalises them.
            superpixels (`torch.LongTensor` of shape `(batch, height, width)`):
                Superpixel id of every pixel, from [`CASTImageProcessor`].
            labels (`torch.LongTensor` of shape `(batch,)`, *optional*):
                Class indices for the cross-entropy loss.

        Returns:
            [`~modeling_outputs.ImageClassifierOutput`] (a tuple with `return_dict=False`).
        """
        outputs = self.cast(pixel_values, superpixels, **kwargs)
        logits = self.classifier(outputs.pooler_output)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels.to(logits.device))
        return ImageClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                     attentions=outputs.attentions)


__all__ = ["CASTForImageClassification", "CASTPreTrainedModel", "CASTVisionModel", "CASTVisionOutput"]
