"""Mistakes and damage answered by name (issue 31, point 8): a damaged safetensors file is named, an `evaluate`
metric called with a misspelt or missing argument says which (not evaluate's missing cache file), and OneLIP's causal
mask follows transformers' current `create_causal_mask` (no deprecation warning in the code checkpoints carry)."""

import inspect
import logging
import warnings

import pytest
import torch
from transformers.masking_utils import create_causal_mask

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_himo, tiny_processor
from hf_longclip import OneLIPModel, OneLIPProcessor
from hf_longclip.evaluation import load_model
from hf_longclip.metrics import METRIC_NAMES, load
from hf_longclip.training.runs import load_clip


def test_onelip_forward_warns_nothing(caplog):
    """OneLIP passes `create_causal_mask` its four required arguments by position: the fourth, the cache, is
    `past_key_values` in transformers 5.23 and `cache` from 5.24 (the old keyword warns, and goes in 5.40)."""
    assert list(inspect.signature(create_causal_mask).parameters)[:3] == ["config", "inputs_embeds",
                                                                          "attention_mask"]
    model = OneLIPModel.from_clip(tiny_clip(), max_length=248).eval()
    processor = tiny_processor()
    batch = OneLIPProcessor(image_processor=processor.image_processor, tokenizer=processor.tokenizer,
                            max_length=248)(text=CAPTIONS, images=random_images(len(CAPTIONS)), padding="longest")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        with torch.no_grad():
            model(**batch)
    assert [str(w.message) for w in caught] == [] and caplog.text == ""


@pytest.mark.parametrize("damage", [lambda data: data[: len(data) // 2], lambda data: b"not safetensors"],
                         ids=["truncated", "not-safetensors"])
@pytest.mark.parametrize("load_weights", [lambda path: load_model(str(path), "cpu"), lambda path: load_clip(str(path))],
                         ids=["load_model", "load_clip"])
def test_damaged_weights_are_named(tmp_path, damage, load_weights):
    tiny_himo().save_pretrained(tmp_path)
    tiny_processor().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    with pytest.raises(OSError, match=f"damaged weights in .*{weights}.*copy or download the checkpoint again"):
        load_weights(tmp_path)


MISSPELT = {  # metric: (its inputs with one name misspelt, that name)
    "long_text_retrieval": (dict(text_embed=[[1.0, 0.0]], text_to_image=[0], image_embeds=[[1.0, 0.0]]),
                            "text_embed"),
    "zero_shot_classification": (dict(image_embeds=[[1.0, 0.0]], labels=[0], class_embed=[[1.0, 0.0]]),
                                 "class_embed"),
    "himo_at_k": (dict(score=[[1.0, 0.5]]), "score"),
    "ssi": (dict(original_scores=[[1.0]], noisy_score=[[0.9]]), "noisy_score"),
    "cola_multi": (dict(scores=[[[1.0, 0.0], [0.0, 1.0]]], directions="text_to_image"), "directions"),
    "hierarcaps": (dict(chain_embed=[[[1.0, 0.0]]], chain_texts=[["a"]], chain_to_image=[0]), "chain_embed"),
}


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_a_misspelt_metric_argument_is_named(name, isolated_modules_cache):
    metric = load(name)
    arguments, misspelt = MISSPELT[name]
    with pytest.raises(TypeError, match=rf"unknown argument\(s\) \['{misspelt}'\]: \w+ takes the inputs"):
        metric.compute(**arguments)
    with pytest.raises(ValueError, match=r"missing input\(s\) .*add_batch"):
        metric.compute()


def test_a_metric_still_computes_from_added_batches(isolated_modules_cache):
    metric = load("long_text_retrieval")
    metric.add_batch(text_embeds=[[1.0, 0.0], [0.0, 1.0]], text_to_image=[0, 1])
    result = metric.compute(image_embeds=[[1.0, 0.0], [0.0, 1.0]], ks=(1,))
    assert (result["r1_i2t"], result["r1_t2i"]) == (100.0, 100.0)
