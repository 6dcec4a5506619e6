"""The base CLIP that the long-text models start from when no pretrained CLIP is given: a small CLIP trained with
global InfoNCE from scratch on the synthetic scenes (`base_clip_task`), built once and cached
(`hf_longclip.training.recipe.cached_pretraining`): `short_caption_base`, with 77 text positions and short captions
(what train_himo and train_onelip fine-tune), and `infonce_base`, on the full captions (what train_ditm fine-tunes).
`load_clip` and `evaluate_base` evaluate a base as it is: the row its fine-tuned variants start from.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.fileio import naming_damaged_weights
from hf_longclip.modeling_common.dual_encoder import load_clip_model
from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
from hf_longclip.models.himo_clip.processing_himo_clip import HiMoCLIPProcessor
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import whole_model_init
from hf_longclip.training.recipe import BackboneArguments, cached_pretraining


def base_clip_task(backbone: BackboneArguments, dataset, positions: int, seed: int,
                   model_class: type = HiMoCLIPModel):
    """(task, processor) of a small CLIP with `positions` text positions from scratch, trained with global InfoNCE
    (train_himo.py's clip-77 / clip-248): the pretrained base that OneLIP adapts and DITM fine-tunes. `model_class`:
    any of our CLIP-like models (DITM's, so that its base already pools with GPO); its logit scale trains."""
    set_seed(seed)
    tokenizer, image_processor = backbone.processor_parts(dataset, positions)
    model = model_class(model_class.config_class(**backbone.scratch_towers(tokenizer, positions)))
    model.logit_scale.requires_grad_(True)
    processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=positions)
    return HiMoCLIPTask(model, ImageTextCollator(processor), molo_lambda=0.0), processor


def infonce_base(accelerator: Accelerator, name: str, backbone: BackboneArguments, dataset, positions: int,
                 loop_args: LoopArguments, model_class: type = HiMoCLIPModel) -> tuple[str, list[dict]]:
    """`base_clip_task` (with `model_class`) trained on `dataset`'s captions for `backbone.base_steps` steps at
    `backbone.base_learning_rate` from `backbone.base_seed`, cached under `backbone.base_cache_dir` as variant `name`
    (the same base for every seed of `--seeds`: the spread measured is the fine-tuning's); returns its checkpoint
    directory and training history."""
    base_args = backbone.pretraining_loop(loop_args)
    recipe = {"data": dataset["train"]._fingerprint, "towers": backbone.scratch_towers_key(), "positions": positions,
              "model": model_class.config_class.model_type, "warmup_steps": base_args.warmup_steps}
    return cached_pretraining(
        accelerator, backbone.base_cache_dir, f"infonce{positions}", name, recipe,
        lambda: base_clip_task(backbone, dataset, positions, backbone.base_seed, model_class), dataset, base_args,
        label=f"base {name}")


SHORT_BASE = "clip-77"
SHORT_BASE_LENGTH = 77


def short_caption_base(accelerator: Accelerator, backbone: BackboneArguments, dataset,
                       loop_args: LoopArguments) -> str:
    """The paper's starting point in miniature: a CLIP with 77 text positions pretrained from scratch on short
    captions (the first `backbone.base_sentences` sentences of each training caption) with global InfoNCE, for
    `backbone.base_steps` steps at `backbone.base_learning_rate` from `backbone.base_seed`. Built once under
    `backbone.base_cache_dir/clip77-<key>/` (key: a digest of the data and of everything that sets the weights) and
    reused by every later run of any script (resumable while it trains); returns its checkpoint directory. Its
    tokenizer is trained on the whole corpus, long captions included, so the fine-tuned variants keep it."""
    recipe = {"data": dataset["train"]._fingerprint, "towers": backbone.scratch_towers_key(),
              "sentences": backbone.base_sentences}
    checkpoint, _ = cached_pretraining(
        accelerator, backbone.base_cache_dir, "clip77", SHORT_BASE, recipe,
        lambda: base_clip_task(backbone, dataset, SHORT_BASE_LENGTH, backbone.base_seed),
        backbone.short_captions(dataset),
        backbone.pretraining_loop(loop_args, warmup_steps=max(1, backbone.base_steps // 10)), label="base CLIP-77")
    return checkpoint


def load_clip(path: str, trust_remote_code: bool = False):
    """A `CLIPModel` (ours or transformers') from a directory or Hub id, in float32 (`load_clip_model`: code the
    checkpoint ships runs only with `trust_remote_code`); a clear exit otherwise."""
    try:
        with naming_damaged_weights(path):
            return load_clip_model(path, trust_remote_code, dtype=torch.float32)
    except ValueError as error:  # not a CLIPModel, or a checkpoint that needs its own code
        hint = "\n(--trust_remote_code runs it: only for code you trust)" if "trust_remote_code" in str(error) else ""
        raise SystemExit(f"{error}{hint}") from None


def evaluate_base(accelerator: Accelerator, path: str, parts: tuple, max_length: int,
                  evaluate: Callable[[torch.nn.Module, object], dict], trust_remote_code: bool = False) -> dict:
    """The base CLIP at `path` evaluated as it is (call on the main process), through a processor of its own
    (tokenizer, image processor) `parts` reading `max_length` tokens: the row every fine-tuned variant starts from."""
    with whole_model_init(accelerator):
        model = load_clip(path, trust_remote_code)
    processor = HiMoCLIPProcessor(image_processor=parts[1], tokenizer=parts[0], max_length=max_length)
    return evaluate(model.to(accelerator.device), processor)
