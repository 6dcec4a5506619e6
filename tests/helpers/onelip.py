"""OneLIP's objective as its task runs it, and PO-HNM builders (unit rows, a hand-made negative bank), shared by
tests/models/onelip/ and the gradient-cache tests."""

import os
import shutil
from pathlib import Path

import numpy as np

from hf_longclip.models.onelip.modeling_onelip import TRIMRefine, select_tokens
from hf_longclip.objectives.onelip import OneLIPLoss
from hf_longclip.recipes.onelip.negative_bank import NegativeBank


def run_objective(objective: OneLIPLoss, inputs: dict, refine: TRIMRefine, **kwargs) -> dict:
    """Eq. 10 as `OneLIPTask` computes it from `inputs` (the objective's, with `token_embeds`, the projected token
    states, instead of `refined_states`): TRIM-Select with the objective's options and TRIM-Refine (what
    `OneLIPForPreTraining.forward` runs with `objective.token_selection()`), then the objective on Z_agg."""
    inputs = dict(inputs)
    token_embeds = inputs.pop("token_embeds")
    selected = select_tokens(inputs["text_states"], token_embeds, inputs["image_embeds"], inputs["valid"],
                             objective.top_k, objective.alpha, objective.rank, objective.decomposition)
    return objective(**inputs, refined_states=refine(*selected), **kwargs)


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def handmade_bank(directory, captions: np.ndarray, images: np.ndarray, per_sample: int) -> NegativeBank:
    """A bank whose sample s owns captions s*per_sample ... s*per_sample + per_sample - 1. Written in a directory of
    this process's own and renamed into place, so that processes building the same bank at once (the launched
    gradient-cache tests: every rank builds its task) never read one another's half-written files; a bank already in
    place must hold these rows."""
    directory = Path(directory)
    if not (directory / "bank.json").is_file():
        private = directory.with_name(f"{directory.name}.{os.getpid()}")
        offsets = np.arange(0, len(captions) + 1, per_sample, dtype=np.int64)
        NegativeBank.allocate(private, offsets, captions.shape[1])
        caption_rows, image_rows = NegativeBank.writable(private, offsets, captions.shape[1])
        caption_rows[:], image_rows[:] = captions, images
        caption_rows.flush()
        image_rows.flush()
        NegativeBank.seal(private, "handmade", "none")
        try:
            private.rename(directory)
        except OSError:  # another process's bank came first
            shutil.rmtree(private)
    bank = NegativeBank(directory)
    np.testing.assert_array_equal(bank.captions, captions)
    np.testing.assert_array_equal(bank.images, images)
    return bank
