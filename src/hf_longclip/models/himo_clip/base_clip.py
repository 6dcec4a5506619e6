"""The base CLIP that the long-text models start from when no pretrained CLIP is given: a small CLIP (a
HiMoCLIPModel trained with MoLo's global term alone, i.e. global InfoNCE) from scratch (`base_clip_task`,
`train_base_clip`: what train_ditm fine-tunes), and `short_caption_base`, that CLIP with 77 text positions
pretrained on short captions (what train_himo and train_onelip fine-tune), built once and cached. `load_clip` and `evaluate_base` evaluate a base as it is: the row
its fine-tuned variants start from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from filelock import FileLock, Timeout

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.fileio import naming_damaged_weights, write_atomic
from hf_longclip.modeling_common.dual_encoder import load_clip_model
from hf_longclip.training.arguments import NO_TOWER_LOCKS, LoopArguments
from hf_longclip.training.loop import whole_model_init
from hf_longclip.training.lora import LoraArguments
from hf_longclip.training.recipe import BackboneArguments, train_variants

from .configuration_himo_clip import HiMoCLIPConfig
from .modeling_himo_clip import HiMoCLIPModel
from .processing_himo_clip import HiMoCLIPProcessor
from .task import HiMoCLIPTask


def base_clip_task(backbone: BackboneArguments, dataset, positions: int, seed: int):
    """(task, processor) of a small CLIP with `positions` text positions from scratch, trained with global InfoNCE
    (train_himo.py's clip-77 / clip-248): the pretrained base that OneLIP adapts and DITM fine-tunes."""
    set_seed(seed)
    tokenizer, image_processor = backbone.processor_parts(dataset, positions)
    model = HiMoCLIPModel(HiMoCLIPConfig(**backbone.scratch_towers(tokenizer, positions)))
    processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=positions)
    return HiMoCLIPTask(model, ImageTextCollator(processor), molo_lambda=0.0), processor


def train_base_clip(accelerator: Accelerator, name: str, backbone: BackboneArguments, dataset, positions: int,
                    loop_args: LoopArguments, evaluate: Callable[[torch.nn.Module, object], dict],
                    run_args: dict | None = None) -> tuple[str, dict, dict]:
    """Train `base_clip_task` on `dataset` for `backbone.base_steps` optimizer steps at `backbone.base_learning_rate`
    as variant `name` of this run (saved, reloaded and evaluated like any variant; resumable; `run_args`: the script's
    arguments, as `train_variants` takes them); return its checkpoint directory, {name: metrics} and {name: history}. (`short_caption_base` is the cached short-caption variant.)"""
    base_args = replace(loop_args, max_steps=backbone.base_steps, learning_rate=backbone.base_learning_rate,
                        lr_multipliers="", layer_decay=1.0, **NO_TOWER_LOCKS)
    results, histories = train_variants(
        accelerator, [name], lambda _: base_clip_task(backbone, dataset, positions, loop_args.seed), evaluate,
        dataset, base_args, LoraArguments(), phase="base pretraining", run_args=run_args,
    )
    return str(Path(loop_args.output_dir) / name), results, histories


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
    global_batch = (loop_args.process_batch_size * accelerator.num_processes
                    * loop_args.gradient_accumulation_steps)
    recipe = {"data": dataset["train"]._fingerprint, "towers": backbone.scratch_towers_key(),
              "sentences": backbone.base_sentences, "steps": backbone.base_steps,
              "learning_rate": backbone.base_learning_rate, "seed": backbone.base_seed,
              "global_batch": global_batch, "weight_decay": loop_args.weight_decay, "adam_beta2": loop_args.adam_beta2}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(backbone.base_cache_dir) / f"clip77-{key}"
    checkpoint = root / SHORT_BASE
    with _one_builder(accelerator, root):
        if (checkpoint / "config.json").is_file():  # written last, atomically, by save_model
            accelerator.print(f"base CLIP-77: reusing the cached short-caption base at {checkpoint}")
            return str(checkpoint)
        accelerator.print(f"base CLIP-77: pretraining the short-caption base ({backbone.base_steps} steps, "
                          f"{backbone.hidden_size} wide), cached at {checkpoint} for later runs")
        short = {split: dataset[split].map(
                     lambda row: {"caption": " ".join(row["sentences"][:backbone.base_sentences])})
                 for split in ("train", "validation")}
        base_args = replace(loop_args, output_dir=str(root), max_steps=backbone.base_steps, seed=backbone.base_seed,
                            learning_rate=backbone.base_learning_rate, lr_multipliers="", layer_decay=1.0, **NO_TOWER_LOCKS,
                            warmup_steps=max(1, backbone.base_steps // 10), seeds="")
        if accelerator.is_main_process:
            root.mkdir(parents=True, exist_ok=True)
            # what built it, besides the key: another thread count or torch version gives other (close) weights
            built_with = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "processes": accelerator.num_processes}
            write_atomic(root / "recipe.json", json.dumps({**recipe, "built_with": built_with}, indent=2))
        train_variants(accelerator, [SHORT_BASE],
                       lambda _: base_clip_task(backbone, dataset, SHORT_BASE_LENGTH, backbone.base_seed),
                       lambda model, processor: {}, short, base_args, LoraArguments(), phase="base pretraining")
    return str(checkpoint)


@contextmanager
def _one_builder(accelerator: Accelerator, root: Path) -> Iterator[None]:
    """Hold `<root>.lock` while a cached base is checked and built, so that of several runs wanting the same base at
    once one builds it and the others wait, then reuse it (rather than two builds racing, each with its own numerics).
    The main process takes the lock for its run; the other processes of the run wait for it."""
    lock = FileLock(str(root) + ".lock")
    if accelerator.is_main_process:
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            accelerator.print(f"base CLIP-77: another run is building {root}; waiting for it")
            lock.acquire()
    accelerator.wait_for_everyone()
    try:
        yield
    finally:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            lock.release()


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
