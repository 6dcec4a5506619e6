"""DITM's tiny builder, shared by tests/models/ditm/ and the input-check tests."""

import torch
from conftest import tiny_sub_configs

from hf_longclip import DITMConfig, DITMModel


def tiny_ditm(seed: int = 0, **config_kwargs) -> DITMModel:
    """A tiny DITM; `config_kwargs` are configuration options only (tau and lambda are `DITMTask`'s)."""
    torch.manual_seed(seed)
    return DITMModel(DITMConfig(**tiny_sub_configs(248), **config_kwargs)).eval()
