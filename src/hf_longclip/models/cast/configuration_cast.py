"""CAST vision configuration (Ke et al. 2022, "Learning hierarchical image segmentation for recognition and by
recognition"), as F-CAST uses it (Sec. 3.1, App. B): superpixel tokens merged by graph pooling 196 -> 64 -> 32 -> 16,
CAST's last pooling (16 -> 8) dropped."""

from transformers import PretrainedConfig

from hf_longclip.modeling_common.saving import CodeBundleMixin

STEM_STRIDE = 8  # CAST's convolutional stem: three stride-2 convolutions
POSITION_LAYOUTS = ("interleaved", "blocks")
SEGMENT_POOLINGS = ("pixels", "cells")
POSITION_EMBEDDING_TYPES = ("sincos", "learned")
EMPTY_SEGMENTS = ("masked", "zero_tokens")


class CASTVisionConfig(CodeBundleMixin, PretrainedConfig):
    r"""
    Configuration of [`CASTVisionModel`]. Defaults are CAST-B at 224 px as F-CAST uses it (width and heads of
    ViT-B/16, blocks (3, 3, 3, 2), graph pooling to 64, 32 and 16 segments).

    hidden_size (`int`, defaults to 768), num_attention_heads (`int`, defaults to 12), intermediate_size (`int`,
    defaults to 3072), hidden_act (`str`, defaults to `"gelu"`), layer_norm_eps (`float`, defaults to 1e-6),
    attention_dropout (`float`, defaults to 0.0):
        The transformer blocks (timm's ViT block, as CAST's). The graph pooling MLP is intermediate_size wide.
    dropout (`float`, defaults to 0.0):
        Dropout after the graph pooling MLP's activation.
    num_channels (`int`, defaults to 3), image_size (`int`, defaults to 224):
        Input channels, and the image side the defaults are set for (any size >= 8 px runs).
    num_segments (`int`, defaults to 196):
        Superpixel tokens of the first stage: superpixel ids must lie in [0, num_segments); ids without pixels
        are padding.
    depths (`list[int]`, defaults to `(3, 3, 3, 2)`):
        Transformer blocks of each stage.
    num_clusters (`list[int]`, defaults to `(64, 32, 16)`):
        Segments after the graph pooling that ends each stage but the last (one fewer than `depths`), decreasing.
    assignment_scale (`float`, defaults to 5.0):
        Factor of the cosine similarity in the soft assignment softmax(scale * cos(token, seed)) (CAST's 5).
    initializer_range (`float`, defaults to 0.02):
        Std of the [CLS] token at initialisation.
    position_layout (`str`, defaults to `"interleaved"`):
        Channel order of the 2-D sin-cos positions: "interleaved" (row then column halves, each sin/cos pairs per
        frequency) or "blocks" (released CAST's: sin and cos of the row over all frequencies, then of the column).
    pooling_layer_norm_eps (`float`, defaults to 1e-6):
        Epsilon of the graph pooling MLP's two LayerNorms (released CAST's: 1e-5, PyTorch's default).
    segment_pooling (`str`, defaults to `"pixels"`):
        How stem features become segment tokens: "pixels" (the mean over each segment's pixels of the features
        nearest-upsampled to pixels: every pixel counts) or "cells" (released CAST's: the label map
        nearest-downsampled to the stem grid, the mean over the cells a segment keeps; a segment keeping none is
        padding).
    position_embedding_type (`str`, defaults to `"sincos"`):
        "sincos" (fixed 2-D sin-cos features in `position_layout`, any image size) or "learned" (a trained table of
        (image_size / 8)^2 rows, released CAST's DeiT-trained models, `cast_deit.py`; images must then be
        image_size px).
    empty_segments (`str`, defaults to `"masked"`):
        What a superpixel id without a token's worth of pixels (none at all, or with `segment_pooling="cells"` none
        of the stem cells) becomes: "masked" (padding: no key in attention, no part in the graph pooling; per
        image) or "zero_tokens" (released CAST's: every id up to the batch's largest id owning pixels is a token,
        an empty one a zero vector that attends, is attended to, and is grouped like the others; only its
        choice as a pooling seed is excluded; larger ids are padding, so an image's output depends on the ids its
        batch holds).
    """

    model_type = "cast_vision"
    main_input_name = "pixel_values"

    def __init__(self, hidden_size: int = 768, num_attention_heads: int = 12, intermediate_size: int = 3072,
                 hidden_act: str = "gelu", layer_norm_eps: float = 1e-6, attention_dropout: float = 0.0,
                 dropout: float = 0.0, num_channels: int = 3, image_size: int = 224, num_segments: int = 196,
                 depths=(3, 3, 3, 2), num_clusters=(64, 32, 16), assignment_scale: float = 5.0,
                 initializer_range: float = 0.02, position_layout: str = "interleaved",
                 pooling_layer_norm_eps: float = 1e-6, segment_pooling: str = "pixels",
                 position_embedding_type: str = "sincos", empty_segments: str = "masked", **kwargs):
        depths, num_clusters = list(depths), list(num_clusters)
        if hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_attention_heads "
                             f"({num_attention_heads})")
        if hidden_size % 8:
            raise ValueError(f"hidden_size must be divisible by 8 (the stem's widths and 2-D sin-cos positions), "
                             f"got {hidden_size}")
        if not depths or min(depths) < 1:
            raise ValueError(f"depths must be a non-empty list of positive block counts, got {depths}")
        if len(num_clusters) != len(depths) - 1:
            raise ValueError(f"num_clusters needs one entry per graph pooling, i.e. len(depths) - 1 = "
                             f"{len(depths) - 1}, got {num_clusters}")
        sizes = [num_segments, *num_clusters]
        if min(sizes) < 1 or any(coarse >= fine for fine, coarse in zip(sizes, sizes[1:])):
            raise ValueError(f"segment counts must decrease stage by stage: num_segments {num_segments}, "
                             f"num_clusters {num_clusters}")
        if image_size < STEM_STRIDE:
            raise ValueError(f"image_size ({image_size}) is smaller than the stem stride ({STEM_STRIDE})")
        if num_segments > image_size**2:
            raise ValueError(f"num_segments ({num_segments}) exceeds the {image_size**2} pixels of a "
                             f"{image_size} px image")
        for name, value, allowed in (("position_layout", position_layout, POSITION_LAYOUTS),
                                     ("segment_pooling", segment_pooling, SEGMENT_POOLINGS),
                                     ("position_embedding_type", position_embedding_type, POSITION_EMBEDDING_TYPES),
                                     ("empty_segments", empty_segments, EMPTY_SEGMENTS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if assignment_scale <= 0:
            raise ValueError(f"assignment_scale must be > 0, got {assignment_scale}")
        self.hidden_size, self.num_attention_heads, self.intermediate_size = hidden_size, num_attention_heads, \
            intermediate_size
        self.hidden_act, self.layer_norm_eps, self.attention_dropout = hidden_act, layer_norm_eps, attention_dropout
        self.dropout, self.num_channels, self.image_size = dropout, num_channels, image_size
        self.num_segments, self.depths, self.num_clusters = num_segments, depths, num_clusters
        self.assignment_scale, self.initializer_range = assignment_scale, initializer_range
        self.position_layout, self.pooling_layer_norm_eps = position_layout, pooling_layer_norm_eps
        self.segment_pooling, self.position_embedding_type = segment_pooling, position_embedding_type
        self.empty_segments = empty_segments
        super().__init__(**kwargs)

    @property
    def num_hidden_layers(self) -> int:
        """Transformer blocks in all stages."""
        return sum(self.depths)


__all__ = ["EMPTY_SEGMENTS", "POSITION_EMBEDDING_TYPES", "POSITION_LAYOUTS", "SEGMENT_POOLINGS", "STEM_STRIDE",
           "CASTVisionConfig"]
