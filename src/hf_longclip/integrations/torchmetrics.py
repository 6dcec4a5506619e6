"""Long captions in torchmetrics' CLIP Score: a HiMo-CLIP or Long-CLIP exported as a plain transformers CLIP folder
(`hf-longclip export-clip`, `hf-longclip convert ... --as-clip`: a `CLIPModel` with 248 text positions and a
`CLIPProcessor`) scores captions of up to 248 tokens whole::

    from torchmetrics.multimodal.clip_score import CLIPScore
    metric = CLIPScore(model_name_or_path=clip_score_model("path/to/clip-folder"))
    metric.update(images, captions)  # uint8 images (N, 3, H, W), N captions
    metric.compute()                 # max(100 * mean cosine, 0)

(the functional `torchmetrics.functional.multimodal.clip_score(images, captions, clip_score_model(folder))` alike).

Why not the folder's path itself (torchmetrics 1.9.0, read from its source):

- a string `model_name_or_path` is matched by what it contains: "openai" loads `CLIPModel` / `CLIPProcessor`,
  "jinaai" remote code, "zer0int" a CLIP whose `max_position_embeddings` is forced to 248 with a processor padding to
  248; any other string (a local folder) raises ValueError. A callable returning `(model, processor)` is its
  documented way to take any other CLIP-like model;
- it divides `model.get_text_features(...)` by its norm, but transformers 5 returns a `BaseModelOutputWithPooling`
  there (torchmetrics issue #3407, fixed after 1.9.0): an AttributeError with a plain `CLIPModel`;
- it calls `processor(text=captions, return_tensors="pt", padding=True)`, without truncation, and cuts token rows
  longer than the model's `max_position_embeddings` afterwards (with a warning): that drops the end-of-text token, at
  which CLIP pools, so the score silently reads another token's state.

`clip_score_model(folder)` returns that callable. It loads the folder's `CLIPModel` (eval mode, no gradients) behind
`CLIPScoreFeatures`, whose feature methods return the projected embeddings (`pooler_output`) as tensors, and its
`CLIPProcessor` with `truncation=True` as its default and `model_max_length` set to the model's positions: captions of
up to 248 tokens are scored whole, longer ones cut to 248 with the end-of-text token kept (as our processors cut
them). Only transformers and torch are used (no torchvision); torchmetrics itself is not imported here.
"""

from collections.abc import Callable
from pathlib import Path

import torch
from transformers import CLIPModel, CLIPProcessor, PretrainedConfig


class CLIPScoreFeatures(torch.nn.Module):
    """A transformers CLIP model as torchmetrics' CLIP Score calls it: `get_text_features(input_ids, attention_mask)`
    and `get_image_features(pixel_values)` return the projected embeddings as tensors; `config` is the model's (read
    by torchmetrics for `text_config.max_position_embeddings`)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    @property
    def config(self) -> PretrainedConfig:
        return self.model.config

    def get_text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output


def clip_score_model(clip_dir: str | Path) -> Callable[[], tuple[CLIPScoreFeatures, CLIPProcessor]]:
    """torchmetrics' `model_name_or_path` for a plain CLIP folder (`hf-longclip export-clip`, `convert --as-clip`,
    or any transformers CLIP checkpoint): a callable returning `(CLIPScoreFeatures(model), processor)`, loaded on the
    first call and the same pair afterwards (the functional `clip_score` calls it on every call). The processor
    truncates texts to the model's text positions, keeping the end-of-text token. A folder of another model type (a
    HiMo-CLIP checkpoint) raises ValueError when called."""
    loaded: list[tuple[CLIPScoreFeatures, CLIPProcessor]] = []

    def load() -> tuple[CLIPScoreFeatures, CLIPProcessor]:
        if not loaded:
            config, _ = PretrainedConfig.get_config_dict(str(clip_dir))
            if config.get("model_type") != "clip":
                raise ValueError(f"{clip_dir} holds a {config.get('model_type')!r} model, not a plain CLIP: write one "
                                 "with `hf-longclip export-clip` (HiMo-CLIP, Long-CLIP) first")
            model = CLIPModel.from_pretrained(str(clip_dir)).eval().requires_grad_(False)
            processor = CLIPProcessor.from_pretrained(
                str(clip_dir), truncation=True, model_max_length=model.config.text_config.max_position_embeddings)
            loaded.append((CLIPScoreFeatures(model), processor))
        return loaded[0]

    return load


__all__ = ["CLIPScoreFeatures", "clip_score_model"]
