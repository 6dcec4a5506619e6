"""A HiMo-CLIP or Long-CLIP as what it is at inference: a transformers `CLIPModel` with 248 text positions and a
`CLIPProcessor`, a folder that loads with no remote code (`hf-longclip export-clip`, `hf-longclip convert ...
--as-clip`).

    clip_dir = save_as_clip(HiMoCLIPModel.from_pretrained(path), HiMoCLIPProcessor.from_pretrained(path), "out/")
    model, processor = CLIPModel.from_pretrained(clip_dir), CLIPProcessor.from_pretrained(clip_dir)

The weights are the same tensors (the logit scale reshaped from (1,) to CLIP's scalar), so the features are equal.
What is left out matters only in training: `frozen_position_rows` (position rows kept frozen by fine-tuning).
"""

from __future__ import annotations

import copy
from pathlib import Path

from transformers import CLIPConfig, CLIPModel, CLIPProcessor
from transformers import initialization as init

from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor


def to_clip_model(model: HiMoCLIPModel) -> CLIPModel:
    """`model`'s weights in a transformers `CLIPModel` with its text positions (copied, not shared)."""
    if not isinstance(model, HiMoCLIPModel):
        raise ValueError(f"a plain CLIPModel is written for HiMo-CLIP and Long-CLIP (HiMoCLIPModel), not "
                        f"{type(model).__name__}, whose inference is not CLIP's")
    config = CLIPConfig(text_config=model.config.text_config.to_dict(),
                        vision_config=model.config.vision_config.to_dict(),
                        projection_dim=model.config.projection_dim,
                        logit_scale_init_value=model.config.logit_scale_init_value)
    with init.no_init_weights():
        clip = CLIPModel(config)
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    state["logit_scale"] = state["logit_scale"].reshape(())
    clip.load_state_dict(state)  # strict: every weight of CLIP comes from the model, none is left over
    return clip.to(device=model.device, dtype=model.dtype).eval()


def to_clip_processor(processor: HiMoCLIPProcessor) -> CLIPProcessor:
    """A `CLIPProcessor` with `processor`'s image processor and tokenizer, truncating to its `max_length` (pass
    `padding=True, truncation=True` to pad batches and cut long texts, as with any `CLIPProcessor`)."""
    tokenizer = copy.deepcopy(processor.tokenizer)
    tokenizer.model_max_length = processor.max_length
    return CLIPProcessor(image_processor=copy.deepcopy(processor.image_processor), tokenizer=tokenizer)


def save_as_clip(model: HiMoCLIPModel, processor: HiMoCLIPProcessor | None, output_dir: str | Path) -> Path:
    """Write `to_clip_model(model)` (and `to_clip_processor(processor)`) to `output_dir`; returns it."""
    output_dir = Path(output_dir)
    to_clip_model(model).save_pretrained(output_dir)
    if processor is not None:
        to_clip_processor(processor).save_pretrained(output_dir)
    return output_dir


__all__ = ["save_as_clip", "to_clip_model", "to_clip_processor"]
