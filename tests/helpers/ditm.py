"""DITM's tiny builders, shared by tests/models/ditm/ and the input-check tests."""

import torch

from helpers.builders import tiny_processor, tiny_sub_configs
from hf_longclip import DITMConfig, DITMModel, DITMProcessor


def tiny_ditm(seed: int = 0, **config_kwargs) -> DITMModel:
    """A tiny DITM; `config_kwargs` are configuration options only (tau and lambda are `DITMTask`'s)."""
    torch.manual_seed(seed)
    return DITMModel(DITMConfig(**tiny_sub_configs(248), **config_kwargs)).eval()


def ditm_processor() -> DITMProcessor:
    himo = tiny_processor()
    return DITMProcessor(image_processor=himo.image_processor, tokenizer=himo.tokenizer, max_length=248)
