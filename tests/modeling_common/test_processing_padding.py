"""The processors pad texts to the longest of the call by default, as `CLIPProcessor` does, and the text features
equal those of padding to the model's length (248 / F-CAST's chunk length) up to float rounding: the text towers
attend causally and pool at the end-of-text token (F-CAST's second stage reads the pooled chunks)."""

import pytest
import torch

from helpers import fcast
from helpers.builders import CAPTIONS
from helpers.dual_encoders import clip_like
from helpers.numerics import rounding_atol, transformer_roundings
from hf_longclip import (
    DITMModel,
    DITMProcessor,
    HiMoCLIPModel,
    HiMoCLIPProcessor,
    OneLIPModel,
    OneLIPProcessor,
)

SHORT_QUERIES = ["a red circle.", "two blue squares.", "a cat."]


def _model_and_processor(name: str):
    if name == "fcast":
        return fcast.tiny_fcast().eval(), fcast.tiny_processor()
    classes = {"himo_clip": (HiMoCLIPModel, HiMoCLIPProcessor), "onelip": (OneLIPModel, OneLIPProcessor),
               "ditm": (DITMModel, DITMProcessor)}[name]
    return clip_like(*classes)


@pytest.mark.parametrize("name", ["himo_clip", "onelip", "ditm", "fcast"])
def test_longest_padding_is_the_default_and_gives_the_max_length_features(name):
    model, processor = _model_and_processor(name)
    for texts in (SHORT_QUERIES, CAPTIONS[:1] + SHORT_QUERIES):
        default = processor(text=texts)
        full = processor(text=texts, padding="max_length")
        assert full["input_ids"].shape[-1] == processor.max_length
        longest = int(full["attention_mask"].sum(-1).max())
        assert default["input_ids"].shape[-1] == longest < processor.max_length, "the default pads to the longest"
        with torch.no_grad():
            short = model.get_text_features(**default).pooler_output
            padded = model.get_text_features(**full).pooler_output
        # softmax and matmuls over other key counts: a few eps of the features' magnitude per reduction of each layer
        layers = model.config.text_config.num_hidden_layers + getattr(model.config.text_config, "num_stage2_layers", 0)
        torch.testing.assert_close(short, padded, rtol=0, atol=rounding_atol(padded, transformer_roundings(layers)))
