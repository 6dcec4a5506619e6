"""F-CAST's tiny builders, shared by tests/models/fcast/: four scene captions, Table 2's rows (FLAIR to F-CAST), a
processor with a tokenizer trained on the captions, configurations, models and tasks of each row, and images."""

import numpy as np
import torch
from PIL import Image

from hf_longclip import CASTImageProcessor, FCASTConfig, FCASTModel, FCASTProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.models.fcast.chunking import balanced_chunks
from hf_longclip.recipes.fcast.task import FCASTTask

CAPTIONS = [
    "A red circle is on the left. A blue square is at the top. The ground is plain. A green star is small.",
    "A yellow triangle is large. A red square is on the right. The sky is grey. A blue circle is tiny.",
    "A green circle is in the middle. A purple star is at the bottom. The scene is bright. A red star is big.",
    "A blue triangle is on the left. A yellow circle is at the top. The ground is dark. A green square is low.",
]

TABLE2 = {  # name: (vision_backbone, hierarchical text encoder, the task's objective), FLAIR to F-CAST
    "flair": ("vit", False, "flair"), "flair-cast": ("cast", False, "flair"),
    "flair-cast-hier": ("cast", True, "flair"), "fcast": ("cast", True, "fcast"),
}


def tiny_processor(num_chunks: int = 4) -> FCASTProcessor:
    tokenizer = train_scene_tokenizer(CAPTIONS, model_max_length=77)
    return FCASTProcessor(CASTImageProcessor(size=32, num_segments=16), tokenizer, max_length=16, num_chunks=num_chunks)


def tiny_config(row: str = "fcast", **overrides) -> FCASTConfig:
    """A tiny configuration of one of Table 2's rows (its objective is the task's: `fcast_task`)."""
    backbone, hierarchical, objective = TABLE2[row]
    tokenizer = tiny_processor().tokenizer
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_attention_heads=4,
                num_hidden_layers=2, num_stage2_layers=int(hierarchical), num_chunks=4 if hierarchical else 1,
                max_position_embeddings=16, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    tower = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32)
    vision = (dict(tower, num_hidden_layers=2, patch_size=8) if backbone == "vit" else
              dict(tower, num_segments=16, depths=[1, 1, 1], num_clusters=[6, 3]))
    defaults = {"text_config": text, "vision_config": vision, "projection_dim": 16, "pool_heads": 2,
                "vision_backbone": backbone, "grounding_stage": 2 if objective == "flair" else 1}
    return FCASTConfig(**{**defaults, **overrides})


def tiny_fcast(seed: int = 0, row: str = "fcast", **overrides) -> FCASTModel:
    torch.manual_seed(seed)
    return FCASTModel(tiny_config(row, **overrides))


def fcast_task(model: FCASTModel, row: str = "fcast", **options) -> FCASTTask:
    """The training task of one of Table 2's rows over `model` (F-CAST's two-level loss or FLAIR's flat loss)."""
    return FCASTTask(model, None, objective=TABLE2[row][2], **options)


def random_images(n: int) -> list[Image.Image]:
    return [Image.fromarray(np.random.default_rng(i).integers(0, 256, (40, 48, 3), dtype=np.uint8)) for i in range(n)]

def training_inputs(k: int = 6, row: str = "fcast") -> dict:
    """4 images, each with K sub-captions: its caption's 4 balanced chunks, then sentences of the next caption."""
    processor = tiny_processor(4 if TABLE2[row][1] else 1)
    subs = []
    for index, caption in enumerate(CAPTIONS):
        other = balanced_chunks(CAPTIONS[(index + 1) % len(CAPTIONS)], 4)
        subs.append(balanced_chunks(caption, 4) + other[: k - 4])
    return dict(processor(text=subs, images=random_images(len(CAPTIONS))))
