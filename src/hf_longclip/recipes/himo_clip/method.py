"""HiMo-CLIP and its baseline, Long-CLIP's fine-tuning, as the registry knows them (`hf_longclip.recipes.registry`)."""

from accelerate.utils import set_seed

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.models.himo_clip.configuration_himo_clip import HiMoCLIPConfig
from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
from hf_longclip.models.himo_clip.processing_himo_clip import HiMoCLIPProcessor
from hf_longclip.recipes.himo_clip.card import CARD
from hf_longclip.recipes.himo_clip.evaluation import evaluate_long_captions
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.recipes.longclip import SHORT_PREFIX, FirstSentenceCollator, LongCLIPTask
from hf_longclip.recipes.registry import LONG_LENGTH, SHORT_LENGTH, Method

SCRIPT = "examples/train_himo.py"
# name: the options examples/train_himo.py builds each variant with (text positions, MoLo's options over the
# script's, or Long-CLIP's objective)
VARIANTS = {
    "clip-77": dict(positions=77, molo_lambda=0.0),
    "clip-248": dict(positions=248, molo_lambda=0.0),
    "longclip": dict(positions=248, objective="longclip"),
    "himo-clip": dict(positions=248),
    "himo-clip-released": dict(positions=248, preset="released"),
}
# the paper's ablation tables, each a {row: options over himo-clip's} (MoLo's, or `batch_factor`: the global batch as a
# multiple of the script's, which the script sets)
ABLATIONS = {
    "table5": {"L_global": dict(molo_lambda=0.0), "L_comp": dict(molo_global=False),
               "L_global+L_comp^uv": dict(hide_modalities="both"), "L_global+L_comp": {}},
    "table4": {f"tau={tau}": dict(hide_tau=tau) for tau in (0.8, 0.85, 0.9, 0.95)},
    "table6": {f"lambda={weight}": dict(molo_lambda=weight) for weight in (0.5, 1.0, 2.0)},
    "table8": {"batch-x0.5": dict(batch_factor=0.5), "batch-x1": dict(batch_factor=1.0),
               "batch-x2": dict(batch_factor=2.0)},
}


def build_variant(variant: str, start, parts: tuple, seed: int = 0, trust_remote_code: bool = False,
                  pca_components: int = 32, **options) -> tuple:
    """(task, processor) of train_himo.py's `variant` (a name of `VARIANTS`; an ablation row is himo-clip with the
    row's options in `options`): a HiMo-CLIP with the variant's text positions from `start` (a CLIP checkpoint,
    stretched past 77 positions; its own code runs only with `trust_remote_code`), or from scratch (`start`: the
    config's keyword arguments), initialised from `seed`, reading (tokenizer, image processor) `parts`. Trained with
    MoLo (`options`: `HiMoCLIPTask`'s, e.g. `preset`; the variant's override them) or, for `objective="longclip"`,
    Long-CLIP's fine-tuning (`pca_components`; of `options`, only `label_smoothing`)."""
    options = {key: value for key, value in {**options, **VARIANTS[variant]}.items() if key != "batch_factor"}
    positions = options.pop("positions")
    set_seed(seed)  # identical initialisation for every variant
    if isinstance(start, str):
        model = HiMoCLIPModel.from_clip(start, stretch_positions=positions > SHORT_LENGTH,
                                        trust_remote_code=trust_remote_code)
    else:
        model = HiMoCLIPModel(HiMoCLIPConfig(**start))
    processor = HiMoCLIPProcessor(image_processor=parts[1], tokenizer=parts[0], max_length=positions)
    if options.pop("objective", None) == "longclip":
        smoothing = {key: options[key] for key in ("label_smoothing",) if key in options}
        return LongCLIPTask(model, FirstSentenceCollator(processor), pca_components, **smoothing), processor
    return HiMoCLIPTask(model, ImageTextCollator(processor), **options), processor


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
    Method("himo", "HiMo-CLIP: MoLo with HiDe over the gathered batch (HiMoCLIPTask, the paper's preset), 248 tokens",
           _himo, long_caption_batch, script=SCRIPT, variants=VARIANTS, card=CARD, evaluate=evaluate_long_captions,
           build_variant=build_variant, aliases=("molo",)),
    Method("longclip", f"Long-CLIP's fine-tuning (LongCLIPTask): long captions (248 tokens) and their first sentences "
                       f"({SHORT_LENGTH} tokens at most), PCA of the image features",
           _longclip, first_sentence_batch, script=SCRIPT, card=CARD, evaluate=evaluate_long_captions,
           plan_notes=lambda options: [f"Long-CLIP's first sentences padded to {SHORT_LENGTH} tokens (the collator "
                                       "pads to the longest)"]),
)
