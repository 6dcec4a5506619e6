"""The tiny models, processors, captions and images most tests build: a real CLIP tokenizer over a character vocabulary,
tiny CLIP / HiMo-CLIP models and their sub-configurations, HiMo-CLIP's (and OneLIP's) processor over it, HiMo-CLIP's
training task and MoLo's total, four scene captions and random images."""

import string

import numpy as np
import torch
from PIL import Image
from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor, OneLIPProcessor

IMAGE_SIZE = 32

CAPTIONS = [
    "a red circle in the top left. a small blue square below it.",
    "two green triangles. one is large and one is small.",
    "a yellow cross in the center of a gray picture.",
    "a purple diamond on the right. an orange circle on the left. nothing else.",
]


def char_clip_tokenizer() -> CLIPTokenizer:
    """transformers' real CLIP BPE tokenizer over a character vocabulary (no merges): any lowercase text works."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in string.ascii_lowercase + string.digits + ".,":
        vocab[char] = len(vocab)
        vocab[char + "</w>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[])


def tiny_sub_configs(max_positions: int = 77, vocab_size: int = 80) -> dict:
    width = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    return dict(
        text_config=dict(width, vocab_size=vocab_size, max_position_embeddings=max_positions,
                         bos_token_id=0, eos_token_id=1, pad_token_id=1),
        vision_config=dict(width, image_size=IMAGE_SIZE, patch_size=8),
        projection_dim=16,
    )


def tiny_clip(seed: int = 0) -> CLIPModel:
    torch.manual_seed(seed)
    return CLIPModel(CLIPConfig(**tiny_sub_configs(77))).eval()


def tiny_himo(seed: int = 0, max_positions: int = 248, **config_kwargs) -> HiMoCLIPModel:
    """A tiny HiMo-CLIP; `config_kwargs` are configuration options only (MoLo's options are the task's:
    `himo_task`)."""
    torch.manual_seed(seed)
    return HiMoCLIPModel(HiMoCLIPConfig(**tiny_sub_configs(max_positions), **config_kwargs)).eval()


def himo_task(model, collate_fn=None, **options):
    """HiMo-CLIP's training task (MoLo) over `model`, with MoLo's / HiDe's `options` (`hide_tau`, `molo_lambda`,
    `hide_scope`, ...). Its `compute_loss(model, batch)` gives the named terms of MoLo."""
    from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask

    return HiMoCLIPTask(model, collate_fn, **options)


def molo_loss(image_embeds, text_embeds, logit_scale, tau: float = 0.9, weight: float = 1.0, scope: str = "global"):
    """The MoLo objective's total: the sum of its named terms."""
    from hf_longclip.objectives.himo_clip import MoLoLoss

    return sum(MoLoLoss(tau, weight, scope)(image_embeds, text_embeds, logit_scale).values())


def tiny_processor(max_length: int = 248) -> HiMoCLIPProcessor:
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return HiMoCLIPProcessor(image_processor=image_processor, tokenizer=char_clip_tokenizer(), max_length=max_length)


def tiny_onelip_processor(max_length: int = 248) -> OneLIPProcessor:
    """OneLIP's processor over `tiny_processor`'s image processor and character tokenizer."""
    base = tiny_processor()
    return OneLIPProcessor(image_processor=base.image_processor, tokenizer=base.tokenizer, max_length=max_length)


def random_images(n: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(n)]
