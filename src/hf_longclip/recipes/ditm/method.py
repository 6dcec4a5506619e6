"""DITM as the registry knows it (`hf_longclip.recipes.registry`): adaptive triplet + ordering over several
captions an image (Eq. 7), GPO pooling."""

import torch
from accelerate.utils import set_seed

from hf_longclip.models.ditm.configuration_ditm import DITMConfig
from hf_longclip.models.ditm.modeling_ditm import DITMModel
from hf_longclip.models.ditm.processing_ditm import DITMProcessor
from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
from hf_longclip.models.himo_clip.processing_himo_clip import HiMoCLIPProcessor
from hf_longclip.models.onelip.modeling_onelip import OneLIPModel
from hf_longclip.models.onelip.processing_onelip import OneLIPProcessor
from hf_longclip.recipes.ditm.card import CARD
from hf_longclip.recipes.ditm.evaluation import evaluate_hierarchy
from hf_longclip.recipes.ditm.task import DITMTask, MultiCaptionCollator
from hf_longclip.recipes.registry import LONG_LENGTH, Method
from hf_longclip.training.memory import with_host_values
from hf_longclip.training.runs import load_clip

CAPTIONS_PER_IMAGE = 2  # MultiCaptionCollator's default
VSE_MARGIN_DESCRIPTIVENESS = 0.6  # 2 * 0.6 / tau(6) = 0.2, VSE++'s margin
# name: Table IV's objective, as examples/train_ditm.py builds it: VSE++'s fixed margin (one constant descriptiveness)
# or the adaptive one, and the ordering weight (none given: the script's)
VARIANTS = {
    "vse++": dict(fixed_margin=True, order_weight=0.0),
    "adaptive": dict(fixed_margin=False, order_weight=0.0),
    "adaptive+order": dict(fixed_margin=False),
}
BACKBONES = {"ditm": (DITMModel, DITMProcessor), "himo_clip": (HiMoCLIPModel, HiMoCLIPProcessor),
             "onelip": (OneLIPModel, OneLIPProcessor)}  # the models its objectives train (model, processor)


def with_positives(dataset):
    """Each split of the synthetic scenes with `image_id` (row index), `positives` (graded levels 2-4 and the full
    captions) and, for the vse++ variant, a constant score per positive."""
    def positives(row, index):
        texts = row["levels"][1:] + row["captions"]
        return {"image_id": index, "positives": texts, "vse_descriptiveness": [VSE_MARGIN_DESCRIPTIVENESS] * len(texts)}

    return dataset.map(positives, with_indices=True, remove_columns=["boxes", "subtexts", "sentences"])


def base_model_class(backbone: str) -> type:
    """The class of the InfoNCE base a backbone's variants fine-tune in the miniature: DITM's own for DITM (GPO pools
    from the start, so each variant starts as the base, Sec. IV-C.1), a HiMo-CLIP (a plain CLIP) otherwise."""
    return DITMModel if backbone == "ditm" else HiMoCLIPModel


def build_variant(variant: str, start: str, parts: tuple, seed: int = 0, backbone: str = "ditm",
                  warmup_steps: int = 0, margin_scale: float = 6.0, order_weight: float = 0.07,
                  captions_per_image: int = 3, trust_remote_code: bool = False) -> tuple:
    """(task, processor) of train_ditm.py's `variant` (a name of `VARIANTS`): the `backbone` model (of `BACKBONES`)
    built from the CLIP checkpoint `start` (its own code runs only with `trust_remote_code`; a 77-token CLIP is
    stretched to 248 positions, OneLIP's RoPE text encoder reads any length), new weights (GPO) initialised from
    `seed`, reading (tokenizer, image processor) `parts`; `captions_per_image` positives drawn per image, DITM's
    objective with `margin_scale` (tau, Eq. 4), `order_weight` (lambda, Eq. 7; the variant's overrides it) and
    `warmup_steps` of all negatives and a frozen vision transformer."""
    options = {"order_weight": order_weight, **VARIANTS[variant]}
    model_class, processor_class = BACKBONES[backbone]
    set_seed(seed)  # identical initialisation of the new weights (GPO) for every variant
    clip = load_clip(start, trust_remote_code)
    if backbone == "onelip":  # its RoPE text encoder replaces the position table: any length
        model = OneLIPModel.from_clip(clip, max_length=LONG_LENGTH)
    else:
        stretch = clip.config.text_config.max_position_embeddings < LONG_LENGTH  # a 77-token CLIP: Long-CLIP's
        model = model_class.from_clip(clip, stretch_positions=stretch)
    tokenizer, image_processor = parts
    processor = processor_class(image_processor=image_processor, tokenizer=tokenizer, max_length=LONG_LENGTH)
    collator = MultiCaptionCollator(
        processor, captions_per_image, caption_column="positives", seed=seed,
        descriptiveness_column="vse_descriptiveness" if options["fixed_margin"] else "descriptiveness")
    return DITMTask(model, collator, margin_scale, options["order_weight"], warmup_steps), processor


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
                   "image", _ditm, _batch, script="examples/train_ditm.py", card=CARD, evaluate=evaluate_hierarchy,
           variants=VARIANTS, build_variant=build_variant),
)
