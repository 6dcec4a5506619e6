"""The pretrained bases the scripts fine-tune when no pretrained model is given, built once from scratch on the
synthetic scenes and cached (`cached_pretraining`, shared by every later run of any script): the base CLIP the
long-text models start from, a small CLIP trained with global InfoNCE (`base_clip_task`): `short_caption_base`, with
77 text positions and short captions (what train_himo and train_onelip fine-tune), and `infonce_base`, on the full
captions (what train_ditm fine-tunes). `evaluate_base` evaluates a base as it is: the row its fine-tuned variants
start from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from filelock import FileLock, Timeout

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.fileio import write_atomic
from hf_longclip.miniature.backbone import BackboneArguments
from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
from hf_longclip.models.himo_clip.processing_himo_clip import HiMoCLIPProcessor
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import whole_model_init
from hf_longclip.training.lora import LoraArguments
from hf_longclip.training.runs import BASE_FILE, load_clip, train_variants
from hf_longclip.training.task import Task


def cached_pretraining(accelerator: Accelerator, cache_dir: str | Path, prefix: str, name: str, built_from: Mapping,
                       build: Callable[[], tuple[Task, object]], dataset, loop_args: LoopArguments,
                       label: str) -> tuple[str, list[dict]]:
    """A pretrained base built once and shared by every later run (and seed) of any script: variant `name` of
    `build()` trained on `dataset` with `loop_args` (their steps, learning rate and seed: the base's own) under
    `<cache_dir>/<prefix>-<key>/`, key a digest of `built_from` (what the caller's base depends on: data, towers, ...)
    and of the loop arguments that set the weights. Runs wanting the same base at once wait for one builder
    (`one_builder`); a build stopped midway resumes. Progress is labelled "base pretraining", messages `label`.
    Returns the checkpoint directory and the base's training history ([] for a base cached without one)."""
    global_batch = loop_args.process_batch_size * accelerator.num_processes * loop_args.gradient_accumulation_steps
    built_from = {**built_from, "steps": loop_args.max_steps, "learning_rate": loop_args.learning_rate,
              "seed": loop_args.seed, "global_batch": global_batch, "weight_decay": loop_args.weight_decay,
              "adam_beta2": loop_args.adam_beta2}
    if loop_args.adam_epsilon != LoopArguments.adam_epsilon:  # keys of the bases built at torch's default stay valid
        built_from["adam_epsilon"] = loop_args.adam_epsilon
    key = hashlib.sha256(json.dumps(built_from, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir) / f"{prefix}-{key}"
    checkpoint, finished = root / name, root / "eval" / f"{name}.json"
    with one_builder(accelerator, root, label):
        if (checkpoint / "config.json").is_file():  # written last, atomically, by save_model
            accelerator.print(f"{label}: reusing the cached base at {checkpoint}")
        else:
            accelerator.print(f"{label}: pretraining the base ({loop_args.max_steps} steps), cached at {checkpoint} "
                              f"for later runs")
            if accelerator.is_main_process:
                root.mkdir(parents=True, exist_ok=True)
                # what built it, besides the key: another thread count or torch version gives other (close) weights
                built_with = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                              "processes": accelerator.num_processes}
                write_atomic(root / BASE_FILE, json.dumps({**built_from, "built_with": built_with}, indent=2))
            train_variants(accelerator, [name], lambda _: build(), lambda model, processor: {}, dataset,
                           replace(loop_args, output_dir=str(root), seeds=""), LoraArguments(),
                           phase="base pretraining")
    history = json.loads(finished.read_text())["history"] if finished.is_file() else []
    return str(checkpoint), history


@contextmanager
def one_builder(accelerator: Accelerator, root: Path, label: str = "base") -> Iterator[None]:
    """Hold `<root>.lock` while a cached base is checked and built, so that of several runs wanting the same base at
    once one builds it and the others wait, then reuse it (rather than two builds racing, each with its own numerics).
    The main process takes the lock for its run; the other processes of the run wait for it."""
    lock = FileLock(str(root) + ".lock")
    if accelerator.is_main_process:
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            accelerator.print(f"{label}: another run is building {root}; waiting for it")
            lock.acquire()
    accelerator.wait_for_everyone()
    try:
        yield
    finally:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            lock.release()




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
    built_from = {"data": dataset["train"]._fingerprint, "towers": backbone.scratch_towers_key(),
                  "positions": positions, "model": model_class.config_class.model_type,
                  "warmup_steps": base_args.warmup_steps}
    return cached_pretraining(
        accelerator, backbone.base_cache_dir, f"infonce{positions}", name, built_from,
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
    built_from = {"data": dataset["train"]._fingerprint, "towers": backbone.scratch_towers_key(),
                  "sentences": backbone.base_sentences}
    checkpoint, _ = cached_pretraining(
        accelerator, backbone.base_cache_dir, "clip77", SHORT_BASE, built_from,
        lambda: base_clip_task(backbone, dataset, SHORT_BASE_LENGTH, backbone.base_seed),
        backbone.short_captions(dataset),
        backbone.pretraining_loop(loop_args, warmup_steps=max(1, backbone.base_steps // 10)), label="base CLIP-77")
    return checkpoint


def evaluate_base(accelerator: Accelerator, path: str, parts: tuple, max_length: int,
                  evaluate: Callable[[torch.nn.Module, object], dict], trust_remote_code: bool = False) -> dict:
    """The base CLIP at `path` evaluated as it is (call on the main process), through a processor of its own
    (tokenizer, image processor) `parts` reading `max_length` tokens: the row every fine-tuned variant starts from."""
    with whole_model_init(accelerator):
        model = load_clip(path, trust_remote_code)
    processor = HiMoCLIPProcessor(image_processor=parts[1], tokenizer=parts[0], max_length=max_length)
    return evaluate(model.to(accelerator.device), processor)
