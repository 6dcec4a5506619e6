"""One training step's task and rows for every objective, shared by the gradient-caching and compilation tests:
HiMo-CLIP's MoLo with HiDe (as in the paper and as released), Long-CLIP's, OneLIP's three terms with its teacher and
PO-HNM queues, DITM's triplet and ordering terms, F-CAST's part and whole sigmoid terms, FLAIR's, CAST classification.
`CASES[name](directory)` gives (task, rows): 2 x `BATCH` rows, so that each of two processes can take `BATCH`."""

from pathlib import Path

import numpy as np
import torch

from helpers.builders import CAPTIONS, himo_task, random_images, tiny_clip, tiny_himo, tiny_processor
from helpers.cast import tiny_classifier
from helpers.ditm import ditm_processor, tiny_ditm
from helpers.fcast import CAPTIONS as SCENE_CAPTIONS
from helpers.fcast import fcast_task, tiny_fcast
from helpers.fcast import tiny_processor as fcast_processor
from helpers.onelip import handmade_bank, unit
from hf_longclip import CASTImageProcessor, OneLIPForPreTraining, OneLIPProcessor
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.cast.task import ClassificationTask, ImageClassificationCollator
from hf_longclip.recipes.ditm.task import DITMTask, MultiCaptionCollator
from hf_longclip.recipes.fcast.task import FCASTCollator
from hf_longclip.recipes.longclip import FirstSentenceCollator, LongCLIPTask
from hf_longclip.recipes.onelip.hard_negatives import HardNegativeQueues
from hf_longclip.recipes.onelip.task import OneLIPTask

BATCH = 64  # per process


def himo(directory: Path):
    rows = [{"image": image, "caption": f"{CAPTIONS[i % 4]} number {i}."} for i, image in
            enumerate(random_images(2 * BATCH))]
    return himo_task(tiny_himo(seed=0), ImageTextCollator(tiny_processor())), rows


def himo_released(directory: Path):
    """MoLo with the official code's recipe: HiDe per process, components as reconstructed, gathers without gradient."""
    task, rows = himo(directory)
    return himo_task(task.model, task.collate_fn, preset="released"), rows


def longclip(directory: Path):
    """Long-CLIP's objective: long captions and their first sentences, the images' first 8 principal components."""
    rows = [{"image": image, "caption": f"{CAPTIONS[i % 4]} number {i}."} for i, image in
            enumerate(random_images(2 * BATCH))]
    return LongCLIPTask(tiny_himo(seed=0), FirstSentenceCollator(tiny_processor()), num_components=8), rows


def onelip(directory: Path):
    """OneLIP with its teacher and PO-HNM queues of 4 negatives per sample, due for a refresh at this step."""
    clip = tiny_clip()
    base = tiny_processor()
    processor = OneLIPProcessor(image_processor=base.image_processor, tokenizer=base.tokenizer, max_length=248)
    rng = np.random.default_rng(0)
    bank = handmade_bank(directory / "bank", unit(rng.normal(size=(4 * BATCH, 16))).astype(np.float16),
                         unit(rng.normal(size=(2 * BATCH, 16))).astype(np.float16), per_sample=2)
    queues = HardNegativeQueues(bank, directory / "queues", queue_size=4, update_steps=1)
    task = OneLIPTask(OneLIPForPreTraining.from_clip(clip), ImageTextCollator(processor, index_column="index"),
                      teacher=clip, hard_negatives=queues, trim_top_k=20)
    task.step = 1  # the queues were filled at step 0: each is refreshed with this step's embeddings
    rows = [{"image": image, "caption": f"{CAPTIONS[i % 4]} {CAPTIONS[(i + 1) % 4]} number {i}.", "index": i}
            for i, image in enumerate(random_images(2 * BATCH))]
    return task, rows


def ditm(directory: Path):
    """64 images with 2 of their 3 graded captions each (128 texts), in chunks of 16 images."""
    rows = [{"image": image, "captions": [f"{CAPTIONS[(i + j) % 4]} number {i}." for j in range(3)],
             "descriptiveness": [0.1, 0.5, 0.9], "image_id": i} for i, image in enumerate(random_images(2 * BATCH))]
    return DITMTask(tiny_ditm(), MultiCaptionCollator(ditm_processor())), rows


def scenes(num_chunks: int) -> tuple:
    rows = [{"image": image, "caption": SCENE_CAPTIONS[i % 4], "captions": [SCENE_CAPTIONS[i % 4],
                                                                            SCENE_CAPTIONS[(i + 1) % 4]]}
            for i, image in enumerate(random_images(2 * BATCH))]
    return rows, FCASTCollator(fcast_processor(num_chunks), num_sub_captions=max(num_chunks, 2))


def fcast(directory: Path):
    """F-CAST's two-level loss on its CAST backbone (the stem's BatchNorm on running statistics: see
    test_batch_norm_statistics_are_updated_once_per_chunk)."""
    rows, collator = scenes(4)
    task = fcast_task(tiny_fcast(row="fcast"))
    task.collate_fn = collator
    task.model.vision_model.embeddings.stem.apply(lambda m: m.eval() if isinstance(m, torch.nn.BatchNorm2d) else None)
    return task, rows


def flair(directory: Path):
    rows, collator = scenes(1)
    task = fcast_task(tiny_fcast(row="flair"), row="flair")
    task.collate_fn = collator
    return task, rows


def classification(directory: Path):
    rows = [{"image": image, "label": i % 5} for i, image in enumerate(random_images(2 * BATCH))]
    model = tiny_classifier()
    collator = ImageClassificationCollator(CASTImageProcessor(size=32, num_segments=16), lambda row: row["label"],
                                           ["pixel_values", "superpixels"])
    return ClassificationTask(model, collator), rows


CASES = {"himo": himo, "himo_released": himo_released, "longclip": longclip, "onelip": onelip, "ditm": ditm,
         "fcast": fcast, "flair": flair, "classification": classification}
