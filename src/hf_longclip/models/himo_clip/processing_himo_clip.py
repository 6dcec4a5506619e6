"""HiMo-CLIP processor: a CLIP image processor plus a tokenizer that truncates to the model's 248 positions."""

from hf_longclip.modeling_common.processing import DualEncoderProcessor

from .configuration_himo_clip import HIMO_TEXT_POSITIONS


class HiMoCLIPProcessor(DualEncoderProcessor):
    """[`DualEncoderProcessor`] for [`HiMoCLIPModel`]: texts truncated to 248 tokens by default (padded to the
    longest)."""

    def __init__(self, image_processor=None, tokenizer=None, max_length: int = HIMO_TEXT_POSITIONS, **kwargs):
        super().__init__(image_processor, tokenizer, max_length=max_length, **kwargs)


__all__ = ["HiMoCLIPProcessor"]
