"""Every model folder's tiny random model with its processor, for the tests that run each model through a client
(sentence-transformers, ONNX, padding, a saved checkpoint). `TINY_MODELS` holds one builder per folder of
`hf_longclip.models` (tests/export/test_remote_code.py checks it), so a new model folder must bring one and then runs
through those tests; `TEXT_MODELS` are the folders whose model has a text tower."""

import importlib

import torch

from helpers.builders import char_clip_tokenizer, tiny_himo, tiny_processor, tiny_sub_configs
from helpers.fcast import tiny_fcast
from helpers.fcast import tiny_processor as tiny_fcast_processor
from hf_longclip import (
    CASTImageProcessor,
    CASTVisionConfig,
    CASTVisionModel,
    DITMModel,
    DITMProcessor,
    OneLIPModel,
    OneLIPProcessor,
)
from hf_longclip.models import MODEL_FOLDERS

LONG = 248


def clip_like(model_class, processor_class, seed: int = 0):
    """A tiny `model_class` (random, `seed`) of CLIP's layout and its `processor_class` reading LONG tokens."""
    torch.manual_seed(seed)
    config_class = model_class.config_class
    model = model_class(config_class(**tiny_sub_configs(LONG))).eval()
    processor = processor_class(image_processor=tiny_processor().image_processor, tokenizer=char_clip_tokenizer(),
                                max_length=LONG)
    return model, processor


def tiny_cast(seed: int = 0):
    """A tiny CAST (16 superpixels, three levels) and its image processor."""
    torch.manual_seed(seed)
    config = CASTVisionConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32,
                              num_segments=16, depths=[1, 1, 1], num_clusters=[6, 3])
    return CASTVisionModel(config).eval(), CASTImageProcessor(size=32, num_segments=16)


TINY_MODELS = {
    "cast": tiny_cast,
    "ditm": lambda seed=0: clip_like(DITMModel, DITMProcessor, seed),
    "fcast": lambda seed=0: (tiny_fcast(seed).eval(), tiny_fcast_processor()),
    "himo_clip": lambda seed=0: (tiny_himo(seed).eval(), tiny_processor()),
    "onelip": lambda seed=0: clip_like(OneLIPModel, OneLIPProcessor, seed),
}


def tiny_model(folder: str, seed: int = 0):
    """(model, processor) of `folder` (a name of `MODEL_FOLDERS`), in eval mode."""
    if folder not in TINY_MODELS:
        raise KeyError(f"models/{folder}/ has no tiny builder in tests/helpers/tiny_models.py's TINY_MODELS")
    return TINY_MODELS[folder](seed=seed)


TEXT_MODELS = [folder for folder in MODEL_FOLDERS
               if hasattr(importlib.import_module(f"hf_longclip.models.{folder}").AUTO_CLASSES["AutoModel"],
                          "get_text_features")]
