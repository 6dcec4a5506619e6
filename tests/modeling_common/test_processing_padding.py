"""The processors pad texts to the longest of the call by default, as `CLIPProcessor` does, and the text features
equal those of padding to the model's length (248 / F-CAST's chunk length) up to float rounding: the text towers
attend causally and pool at the end-of-text token (F-CAST's second stage reads the pooled chunks)."""

import pytest
import torch

from helpers.builders import CAPTIONS
from helpers.numerics import rounding_atol, transformer_roundings
from helpers.tiny_models import TEXT_MODELS, tiny_model

SHORT_QUERIES = ["a red circle.", "two blue squares.", "a cat."]


@pytest.mark.parametrize("name", TEXT_MODELS)
def test_longest_padding_is_the_default_and_gives_the_max_length_features(name):
    model, processor = tiny_model(name)
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
