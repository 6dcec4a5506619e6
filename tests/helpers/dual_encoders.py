"""A tiny CLIP-like dual encoder of any of our classes (HiMo-CLIP, DITM, OneLIP) with its processor, at 248 tokens:
shared by the integration tests (sentence-transformers, ONNX)."""

import torch

from helpers.builders import char_clip_tokenizer, tiny_processor, tiny_sub_configs

LONG = 248


def clip_like(model_class, processor_class):
    """A tiny `model_class` (random, seed 0) and its `processor_class` reading LONG tokens."""
    torch.manual_seed(0)
    config_class = model_class.config_class
    model = model_class(config_class(**tiny_sub_configs(LONG))).eval()
    processor = processor_class(image_processor=tiny_processor().image_processor, tokenizer=char_clip_tokenizer(),
                                max_length=LONG)
    return model, processor
