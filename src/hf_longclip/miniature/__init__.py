"""The miniature: what lets every script train and compare its method on CPU in minutes, on the synthetic scenes
(`hf_longclip.data.synthetic`): small towers from scratch with a tokenizer trained on the scenes' texts
(`BackboneArguments`, `scene_corpus`), and the small pretrained bases the methods fine-tune, built once and cached
(`BaseArguments`, `cached_pretraining`, `short_caption_base`, `infonce_base`, `evaluate_base`).

Part of the harness, beside `hf_longclip.recipes`: it may import training, data, models, objectives (and HiMo-CLIP's
task, the bases' global InfoNCE); nothing below the harness imports it."""

from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.miniature.backbone import BackboneArguments, BaseArguments, scene_corpus
from hf_longclip.miniature.bases import (
    SHORT_BASE_LENGTH,
    base_clip_task,
    cached_pretraining,
    evaluate_base,
    infonce_base,
    one_builder,
    short_caption_base,
)

__all__ = ["SHORT_BASE_LENGTH", "BackboneArguments", "BaseArguments", "base_clip_task", "cached_pretraining",
           "evaluate_base", "infonce_base", "load_synthetic_scenes", "one_builder", "scene_corpus",
           "short_caption_base"]
