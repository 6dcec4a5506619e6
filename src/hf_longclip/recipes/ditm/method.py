"""DITM as the registry knows it (`hf_longclip.recipes.registry`): adaptive triplet + ordering over several
captions an image (Eq. 7), GPO pooling."""

import torch

from hf_longclip.models.ditm.configuration_ditm import DITMConfig
from hf_longclip.models.ditm.modeling_ditm import DITMModel
from hf_longclip.recipes.ditm.card import CARD
from hf_longclip.recipes.ditm.evaluation import evaluate_hierarchy
from hf_longclip.recipes.ditm.task import DITMTask
from hf_longclip.recipes.registry import LONG_LENGTH, Method
from hf_longclip.training.memory import with_host_values

CAPTIONS_PER_IMAGE = 2  # MultiCaptionCollator's default


def _ditm(size, options):
    model = DITMModel(DITMConfig(text_config=size.text_config(LONG_LENGTH), vision_config=size.vision_config(),
                                 projection_dim=size.projection_dim))
    return model, DITMTask(model, None)


def _batch(size, rows, inputs, options) -> dict:
    """MultiCaptionCollator's: each image once, its captions after it; `text_image_index` is read on the host
    (`DITMTask.split_batch`), so its values are recorded for fake tensors."""
    texts = rows * CAPTIONS_PER_IMAGE
    images = inputs.images(rows)
    owners = torch.arange(rows, device=images.device).repeat_interleave(CAPTIONS_PER_IMAGE)
    owners = with_host_values(owners, [row // CAPTIONS_PER_IMAGE for row in range(texts)])
    return {**inputs.texts(texts, LONG_LENGTH), "pixel_values": images, "text_image_index": owners,
            "image_ids": owners.clone(), "descriptiveness": inputs.scores(texts)}


METHODS = (
    Method("ditm", f"DITM (DITMTask): adaptive triplet + ordering, {CAPTIONS_PER_IMAGE} captions of 248 tokens per "
                   "image", _ditm, _batch, script="examples/train_ditm.py", card=CARD, evaluate=evaluate_hierarchy),
)
