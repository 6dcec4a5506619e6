"""DITM processor: a CLIP image processor plus a tokenizer that truncates to the model's text positions."""

from hf_longclip.modeling_common.processing import DualEncoderProcessor


class DITMProcessor(DualEncoderProcessor):
    """[`DualEncoderProcessor`] for [`DITMModel`]: texts truncated to CLIP's 77 tokens by default (set
    `max_length` to the model's `text_config.max_position_embeddings` for a model with more positions)."""


__all__ = ["DITMProcessor"]
