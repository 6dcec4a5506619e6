"""OneLIP processor: a CLIP image processor plus a tokenizer that truncates to the model's T_g (248) tokens."""

from hf_longclip.modeling_common.processing import DualEncoderProcessor

from .configuration_onelip import ONELIP_TEXT_POSITIONS


class OneLIPProcessor(DualEncoderProcessor):
    """[`DualEncoderProcessor`] for [`OneLIPModel`]: texts truncated to 248 tokens by default (padded to the
    longest); pass the model's `text_config.max_position_embeddings` as `max_length` for another T_g."""

    def __init__(self, image_processor=None, tokenizer=None, max_length: int = ONELIP_TEXT_POSITIONS, **kwargs):
        super().__init__(image_processor, tokenizer, max_length=max_length, **kwargs)


__all__ = ["OneLIPProcessor"]
