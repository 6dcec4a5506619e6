"""HiMo-CLIP and its baseline, Long-CLIP's fine-tuning, as the registry knows them (`hf_longclip.recipes.registry`)."""

from hf_longclip.models.himo_clip.configuration_himo_clip import HiMoCLIPConfig
from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
from hf_longclip.recipes.himo_clip.card import CARD
from hf_longclip.recipes.himo_clip.evaluation import evaluate_long_captions
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.recipes.longclip import SHORT_PREFIX, LongCLIPTask
from hf_longclip.recipes.registry import LONG_LENGTH, SHORT_LENGTH, Method

SCRIPT = "examples/train_himo.py"
# name: the options examples/train_himo.py builds each variant with (text positions, MoLo's options over the
# script's, or Long-CLIP's objective)
VARIANTS = {
    "clip-77": dict(positions=77, molo_lambda=0.0),
    "clip-248": dict(positions=248, molo_lambda=0.0),
    "longclip": dict(positions=248, objective="longclip"),
    "himo-clip": dict(positions=248),
    "himo-clip-released": dict(positions=248, recipe="released"),
}


def converted_model(size):
    """A HiMo-CLIP at `size` as converted from Long-CLIP's release: 248 positions, rows 0-19 kept."""
    return HiMoCLIPModel(HiMoCLIPConfig(text_config=size.text_config(LONG_LENGTH), vision_config=size.vision_config(),
                                        projection_dim=size.projection_dim, frozen_position_rows=20))


def long_caption_batch(size, rows, inputs, options) -> dict:
    """ImageTextCollator's batch: 248-token captions and their images."""
    return {**inputs.texts(rows, LONG_LENGTH), "pixel_values": inputs.images(rows)}


def first_sentence_batch(size, rows, inputs, options) -> dict:
    """FirstSentenceCollator's: the long captions, their first sentences (77 tokens at most) and the images."""
    short = {SHORT_PREFIX + key: value for key, value in inputs.texts(rows, SHORT_LENGTH).items()}
    return {**long_caption_batch(size, rows, inputs, options), **short}


def _himo(size, options):
    model = converted_model(size)
    return model, HiMoCLIPTask(model, None)


def _longclip(size, options):
    model = converted_model(size)
    return model, LongCLIPTask(model, None)


METHODS = (
    Method("himo", "HiMo-CLIP: MoLo with HiDe over the gathered batch (HiMoCLIPTask, the paper's recipe), 248 tokens",
           _himo, long_caption_batch, script=SCRIPT, variants=VARIANTS, card=CARD, evaluate=evaluate_long_captions,
           aliases=("molo",)),
    Method("longclip", f"Long-CLIP's fine-tuning (LongCLIPTask): long captions (248 tokens) and their first sentences "
                       f"({SHORT_LENGTH} tokens at most), PCA of the image features",
           _longclip, first_sentence_batch, script=SCRIPT, card=CARD, evaluate=evaluate_long_captions,
           plan_notes=lambda options: [f"Long-CLIP's first sentences padded to {SHORT_LENGTH} tokens (the collator "
                                       "pads to the longest)"]),
)
