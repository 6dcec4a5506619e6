"""What every example script does around the shared loop, for each variant it compares: build, optionally wrap in
LoRA, train, merge, save atomically, reload the saved checkpoint through `AutoModel(trust_remote_code=True)` (so
what is evaluated is what users load), evaluate; then write `results.json` and the loss curves, print the table and
push each checkpoint with its model card.

    results, histories = train_variants(accelerator, variants, build, evaluate, dataset, loop_args, lora_args)
    publish(accelerator, results, histories, ...)

A script keeps only what is its model's own: how to build each variant, how to evaluate it, its card template and
card info (from the model's package), and its own plots. `run_over_seeds` repeats a script's whole run for each
seed of `--seeds` and reports every table cell as mean +- std; `short_caption_base` is the pretrained CLIP-77 that
train_himo and train_onelip fine-tune, built once and cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from transformers import (
    AutoImageProcessor,
    AutoModel,
    AutoTokenizer,
    CLIPImageProcessorPil,
    CLIPModel,
    HfArgumentParser,
)

from ..data.collate import ImageTextCollator
from ..data.tokenizer import scene_corpus, train_scene_tokenizer
from ..fileio import write_atomic
from ..models.himo_clip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from ..models.himo_clip.task import HiMoCLIPTask
from ..plots import plot_loss_curves, plot_seed_summary
from .hub import ModelCardInfo, build_model_card, push_to_hub
from .loop import LoopArguments, make_accelerator, save_model, train, whole_model_init
from .lora import LoraArguments, apply_lora, count_parameters, merge_lora
from .task import OPTIONS_FILE, Task, save_options

logger = get_logger(__name__)


@dataclass
class HubArguments:
    push_to_hub: bool = field(default=False, metadata={"help": "upload each trained variant with its model card"})
    hub_model_id: str | None = field(default=None, metadata={
        "help": "ORG/NAME; with several variants each goes to ORG/NAME-<variant>"})
    hub_private: bool = field(default=False, metadata={"help": "create private repos"})

    def __post_init__(self):
        if self.push_to_hub and not self.hub_model_id:
            raise ValueError("--push_to_hub needs --hub_model_id ORG/NAME")

    def repo_ids(self, variants: Sequence[str]) -> dict[str, str]:
        if len(variants) == 1:
            return {variants[0]: self.hub_model_id}
        return {variant: f"{self.hub_model_id}-{variant}" for variant in variants}


@dataclass
class BackboneArguments:
    """Where a script's CLIP towers come from: a CLIP checkpoint, or a small model from scratch on the synthetic
    scenes (with a tokenizer trained on their texts)."""

    init_from_clip: str | None = field(
        default=None, metadata={"help": "CLIPModel Hub id or directory to start from; None: a small model from scratch"}
    )
    image_size: int = field(default=64, metadata={"help": "side in pixels of the synthetic images and of the "
                                                          "scratch model's input"})
    hidden_size: int = field(default=128, metadata={"help": "width of both encoders when training from scratch"})
    num_layers: int = field(default=2, metadata={"help": "transformer layers of each encoder when training from "
                                                         "scratch"})
    num_heads: int = field(default=4, metadata={"help": "attention heads of each layer when training from scratch"})
    patch_size: int = field(default=8, metadata={"help": "vision patch side in pixels when training from scratch"})
    base_steps: int = field(default=300, metadata={
        "help": "without --init_from_clip: optimizer steps of the small base CLIP pretrained from scratch (global "
                "InfoNCE) that the variants fine-tune; 0: train_himo trains its variants from scratch"})
    base_learning_rate: float = field(default=5e-4, metadata={"help": "peak learning rate of that base"})
    base_sentences: int = field(default=2, metadata={
        "help": "the short captions of the short-caption base: the first N sentences of each training caption (2: "
                "the scene and its largest object; the first sentence alone names only the count and background)"})
    base_seed: int = field(default=0, metadata={"help": "seed of that base (fixed across --seeds: the variance "
                                                        "measured is the fine-tuning's)"})
    base_cache_dir: str = field(default="outputs/bases", metadata={
        "help": "where the short-caption base CLIP-77 is cached, one directory per (data, towers, recipe), and "
                "reused by every later run of train_himo and train_onelip"})

    def processor_parts(self, dataset, positions: int):
        """(tokenizer, image processor): the checkpoint's, or a tokenizer trained on `dataset`'s texts with
        `positions` positions and a CLIP image processor at `image_size`."""
        if self.init_from_clip:
            return (AutoTokenizer.from_pretrained(self.init_from_clip),
                    AutoImageProcessor.from_pretrained(self.init_from_clip))
        size = self.image_size
        return (train_scene_tokenizer(scene_corpus(dataset), model_max_length=positions),
                CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size}))

    def scratch_towers_key(self) -> dict:
        """What sets the shape of a model from scratch (for cache keys)."""
        return {name: getattr(self, name) for name in ("image_size", "hidden_size", "num_layers", "num_heads",
                                                       "patch_size")}

    def scratch_towers(self, tokenizer, positions: int) -> dict:
        """`text_config`, `vision_config` and `projection_dim` of a small CLIP-like model from scratch."""
        width = dict(hidden_size=self.hidden_size, intermediate_size=4 * self.hidden_size,
                     num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads)
        return dict(
            text_config=dict(width, vocab_size=len(tokenizer), max_position_embeddings=positions,
                             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id),
            vision_config=dict(width, image_size=self.image_size, patch_size=self.patch_size),
            projection_dim=self.hidden_size,
        )


def base_clip_task(backbone: BackboneArguments, dataset, positions: int, seed: int):
    """(task, processor) of a small CLIP with `positions` text positions from scratch, trained with global InfoNCE
    (train_himo.py's clip-77 / clip-248): the pretrained base that OneLIP adapts and DITM fine-tunes."""
    set_seed(seed)
    tokenizer, image_processor = backbone.processor_parts(dataset, positions)
    model = HiMoCLIPModel(HiMoCLIPConfig(**backbone.scratch_towers(tokenizer, positions)))
    processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=positions)
    return HiMoCLIPTask(model, ImageTextCollator(processor), molo_lambda=0.0), processor


def train_base_clip(accelerator: Accelerator, name: str, backbone: BackboneArguments, dataset, positions: int,
                    loop_args: LoopArguments,
                    evaluate: Callable[[torch.nn.Module, object], dict]) -> tuple[str, dict, dict]:
    """Train `base_clip_task` on `dataset` for `backbone.base_steps` optimizer steps at `backbone.base_learning_rate`
    as variant `name` of this run (saved, reloaded and evaluated like any variant; resumable); return its checkpoint
    directory, {name: metrics} and {name: history}. (`short_caption_base` is the cached short-caption variant.)"""
    base_args = replace(loop_args, max_steps=backbone.base_steps, learning_rate=backbone.base_learning_rate,
                        lr_multipliers="", layer_decay=1.0)
    results, histories = train_variants(
        accelerator, [name], lambda _: base_clip_task(backbone, dataset, positions, loop_args.seed), evaluate,
        dataset, base_args, LoraArguments(),
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
    global_batch = (loop_args.per_device_train_batch_size * accelerator.num_processes
                    * loop_args.gradient_accumulation_steps)
    recipe = {"data": dataset["train"]._fingerprint, "towers": backbone.scratch_towers_key(),
              "sentences": backbone.base_sentences, "steps": backbone.base_steps,
              "learning_rate": backbone.base_learning_rate, "seed": backbone.base_seed,
              "global_batch": global_batch, "weight_decay": loop_args.weight_decay, "adam_beta2": loop_args.adam_beta2}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(backbone.base_cache_dir) / f"clip77-{key}"
    checkpoint = root / SHORT_BASE
    if (checkpoint / "config.json").is_file():  # written last, atomically, by save_model
        logger.info(f"reusing the short-caption base CLIP-77 at {checkpoint}", main_process_only=True)
        return str(checkpoint)
    short = {split: dataset[split].map(lambda row: {"caption": " ".join(row["sentences"][:backbone.base_sentences])})
             for split in ("train", "validation")}
    base_args = replace(loop_args, output_dir=str(root), max_steps=backbone.base_steps, seed=backbone.base_seed,
                        learning_rate=backbone.base_learning_rate, lr_multipliers="", layer_decay=1.0,
                        warmup_steps=max(1, backbone.base_steps // 10), seeds="")
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        write_atomic(root / "recipe.json", json.dumps(recipe, indent=2))
    train_variants(accelerator, [SHORT_BASE],
                   lambda _: base_clip_task(backbone, dataset, SHORT_BASE_LENGTH, backbone.base_seed),
                   lambda model, processor: {}, short, base_args, LoraArguments())
    return str(checkpoint)


def load_clip(path: str):
    """A `CLIPModel` (ours or transformers') from a directory or Hub id, in float32; a clear exit otherwise."""
    model = AutoModel.from_pretrained(path, trust_remote_code=True, dtype=torch.float32)
    if not isinstance(model, CLIPModel):
        raise SystemExit(f"{path} holds a {type(model).__name__}, not a CLIPModel")
    return model


def evaluate_base(accelerator: Accelerator, path: str, parts: tuple, max_length: int,
                  evaluate: Callable[[torch.nn.Module, object], dict]) -> dict:
    """The base CLIP at `path` evaluated as it is (call on the main process), through a processor of its own
    (tokenizer, image processor) `parts` reading `max_length` tokens: the row every fine-tuned variant starts from."""
    with whole_model_init(accelerator):
        model = load_clip(path)
    processor = HiMoCLIPProcessor(image_processor=parts[1], tokenizer=parts[0], max_length=max_length)
    return evaluate(model.to(accelerator.device), processor)


def start_run(name: str, script_arguments: type, defaults: Mapping[str, Any], backbone: bool = True):
    """What every script does first: parse its own arguments with `BackboneArguments` (unless `backbone=False`: a
    script whose own arguments describe its models), `LoopArguments`, `LoraArguments` and `HubArguments` (`defaults`
    override theirs), make the accelerator and start its trackers under `name`. Returns (script_args, backbone or
    None, loop_args, lora_args, hub_args, accelerator, run_args), run_args being every argument, for trackers and
    model cards."""
    groups = (script_arguments, *((BackboneArguments,) if backbone else ()), LoopArguments, LoraArguments, HubArguments)
    parser = HfArgumentParser(groups)
    parser.set_defaults(**defaults)
    parsed = parser.parse_args_into_dataclasses()
    script_args, loop_args, lora_args, hub_args = parsed[0], *parsed[-3:]
    backbone_args = parsed[1] if backbone else None
    accelerator = make_accelerator(loop_args)
    run_args = {key: value for group in parsed for key, value in asdict(group).items()}
    accelerator.init_trackers(name, config=run_args)
    return script_args, backbone_args, loop_args, lora_args, hub_args, accelerator, run_args


def parse_variants(text: str, known: Sequence[str]) -> list[str]:
    """The comma-separated variant names of `text`, each one of `known`."""
    variants = [v.strip() for v in text.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(known))
    if unknown or not variants:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(known)}")
    return variants


def train_variants(
    accelerator: Accelerator,
    variants: Sequence[str],
    build: Callable[[str], tuple[Task, object]],
    evaluate: Callable[[torch.nn.Module, object], dict],
    dataset,
    loop_args: LoopArguments,
    lora_args: LoraArguments,
    auto_class: type = AutoModel,
) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """Train, save and evaluate each variant; return {variant: metrics} and {variant: history}.

    `build(variant) -> (task, processor)` is called with every variant built whole (also under ZeRO-3) from the
    same seed; `evaluate(model, processor)` runs on the main process on the checkpoint reloaded with
    `auto_class.from_pretrained(..., trust_remote_code=True)`; its metrics gain `train_seconds`. A resumed run
    (`--resume_from_checkpoint`) skips variants whose evaluation is already written.
    """
    if lora_args.lora_r > 0 and getattr(accelerator.state.deepspeed_plugin, "zero_stage", None) == 3:
        raise SystemExit("LoRA under ZeRO-3 is not supported (merging needs whole weights): use ZeRO-2 or DDP")
    output_dir = Path(loop_args.output_dir)
    results, histories = {}, {}
    for variant in variants:
        eval_file = output_dir / "eval" / f"{variant}.json"  # written last: a resumed run skips finished variants
        if loop_args.resume_from_checkpoint and eval_file.is_file():
            results[variant], histories[variant] = json.loads(eval_file.read_text()).values()
            continue
        with whole_model_init(accelerator):
            task, processor = build(variant)
        if lora_args.lora_r > 0:
            base_dir = output_dir / f"{variant}-lora" / "base"
            save_model(accelerator, task.model, base_dir, processor)  # what the adapter applies to
            task.model = apply_lora(task.model, lora_args, base_model_name_or_path=str(base_dir))
            trainable, total = count_parameters(task.model)
            logger.info(f"{variant}: LoRA trains {trainable:,} of {total:,} parameters", main_process_only=True)
        start = time.perf_counter()
        model, histories[variant] = train(task, dataset["train"], loop_args, accelerator, run_name=variant,
                                          eval_dataset=dataset["validation"])
        seconds = time.perf_counter() - start
        if lora_args.lora_r > 0:
            save_model(accelerator, model, output_dir / f"{variant}-lora" / "adapter")
            model = merge_lora(model)
        save_model(accelerator, model, output_dir / variant, processor)
        if accelerator.is_main_process:  # evaluate what was saved: the same under every engine, ZeRO-3 included
            save_options(task, output_dir / variant)
            with whole_model_init(accelerator):
                saved = auto_class.from_pretrained(output_dir / variant, trust_remote_code=True, dtype=torch.float32)
            results[variant] = {**evaluate(saved.to(accelerator.device), processor),
                                "train_seconds": round(seconds, 1)}
            eval_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(eval_file, json.dumps({"results": results[variant], "history": histories[variant]}))
        accelerator.wait_for_everyone()
        accelerator.free_memory()
    return results, histories


def _cell(value) -> str:
    """A table cell: a number, or a seed summary as mean +- std (mean alone for one seed)."""
    if isinstance(value, Mapping):
        return f"{value['mean']:.3f}" if value["n"] == 1 else f"{value['mean']:.3f}±{value['std']:.3f}"
    return f"{value:.3f}"


def format_table(results: Mapping[str, Mapping], metrics: Sequence[str]) -> str:
    """One row per variant, one column per metric; cells are numbers or `summarize_seeds` summaries."""
    cells = {variant: [_cell(values[name]) for name in metrics] for variant, values in results.items()}
    width = max([12, *(len(variant) + 2 for variant in results)])
    columns = [max(10, len(name) + 2, *(len(row[i]) + 2 for row in cells.values())) for i, name in enumerate(metrics)]
    header = f"{'model':<{width}}" + "".join(f"{name:>{column}}" for name, column in zip(metrics, columns))
    rows = [f"{variant:<{width}}" + "".join(f"{cell:>{column}}" for cell, column in zip(row, columns))
            for variant, row in cells.items()]
    return "\n".join([header, "-" * len(header), *rows])


# Two-sided 97.5% quantiles of Student's t for 1..10 degrees of freedom (a 95% interval of the mean over seeds).
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def summarize_seeds(runs: Mapping[int, Mapping[str, Mapping[str, float]]],
                    metrics: Sequence[str]) -> dict[str, dict[str, dict]]:
    """{variant: {metric: {"mean", "std", "ci95", "n", "values"}}} over the seeds of `runs` ({seed: {variant:
    {metric: value}}}): `std` is the sample standard deviation (n - 1), `ci95` the half-width of the 95% Student-t
    interval of the mean (both 0 for one seed). Every seed must report every variant and metric."""
    seeds = list(runs)
    variants = list(runs[seeds[0]])
    for seed in seeds:
        if list(runs[seed]) != variants:
            raise ValueError(f"seed {seed} reports variants {list(runs[seed])}, seed {seeds[0]} {variants}")
    summary = {}
    for variant in variants:
        summary[variant] = {}
        for metric in metrics:
            values = [float(runs[seed][variant][metric]) for seed in seeds]
            n, mean = len(values), math.fsum(values) / len(values)
            std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
            t = _T_975[min(n - 1, len(_T_975)) - 1] if n > 1 else 0.0  # beyond 10 seeds: 2.228 (conservative)
            summary[variant][metric] = {"mean": mean, "std": std, "ci95": t * std / math.sqrt(n), "n": n,
                                        "values": values}
    return summary


def run_over_seeds(accelerator: Accelerator, loop_args: LoopArguments, hub_args: HubArguments,
                   run: Callable[[LoopArguments], Mapping[str, Mapping[str, float]]], metrics: Sequence[str],
                   name: str = "summary", title: str = "") -> dict | None:
    """A script's whole run, `run(loop_args) -> {variant: metrics}`, once with `--seed` or, with `--seeds 0,1,2`, once
    per seed with that seed and its own `<output_dir>/seed-<s>/` (each resumable). Then, on the main process,
    `<output_dir>/<name>.json` (every seed's results and `summarize_seeds`), `<name>.png` (each metric's mean, std and
    seeds per variant) and, for several seeds, the table of mean +- std on stdout. Returns the summary (main
    process)."""
    seeds = loop_args.seed_list()
    if len(seeds) > 1 and hub_args.push_to_hub:
        raise SystemExit("--push_to_hub with several --seeds would push each seed's checkpoints to the same repos: "
                         "push one seed's run")
    output_dir = Path(loop_args.output_dir)
    if seeds:
        runs = {seed: run(replace(loop_args, seed=seed, seeds="", output_dir=str(output_dir / f"seed-{seed}")))
                for seed in seeds}
    else:
        runs = {loop_args.seed: run(loop_args)}
    if not accelerator.is_main_process:
        return None
    summary = summarize_seeds(runs, metrics)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(output_dir / f"{name}.json", json.dumps(
        {"seeds": list(runs), "metrics": list(metrics), "summary": summary,
         "runs": {str(seed): results for seed, results in runs.items()}}, indent=2))
    plot_seed_summary(summary, metrics, output_dir / f"{name}.png", title or f"{name}: {len(runs)} seed(s)")
    if len(runs) > 1:
        print(f"\nmean ± std over seeds {list(runs)} ({output_dir / name}.json, .png):")
        print(format_table(summary, metrics))
    return summary


def publish(
    accelerator: Accelerator,
    results: dict[str, dict],
    histories: dict[str, list[dict]],
    *,
    output_dir: str | Path,
    metrics: Sequence[str],
    card: ModelCardInfo,
    hub_args: HubArguments,
    run_args: Mapping,
    base_model: str | None = None,
    push_variants: Sequence[str] | None = None,
) -> None:
    """Main process: `results.json`, `loss_curves.png`, the table on stdout and, with `--push_to_hub`, each variant's
    checkpoint pushed with its card (`run_args`: every argument of the run, shown in the card; `push_variants`: the
    variants to push, default all, e.g. to leave out a row whose checkpoint this run did not write)."""
    if not accelerator.is_main_process:
        return
    output_dir = Path(output_dir)
    (output_dir / "results.json").write_text(json.dumps({"results": results, "training": histories}, indent=2))
    plot_loss_curves(histories, output_dir / "loss_curves.png")
    print(format_table(results, metrics))
    print(f"\ncheckpoints, results.json and plots in {output_dir}/")
    if not hub_args.push_to_hub:
        return
    pushed = list(results) if push_variants is None else list(push_variants)
    for variant, repo_id in hub_args.repo_ids(pushed).items():
        config = json.loads((output_dir / variant / "config.json").read_text())
        options = output_dir / variant / OPTIONS_FILE
        config = {**config, **(json.loads(options.read_text()) if options.is_file() else {})}
        rendered = build_model_card(card.template, repo_id=repo_id, info=card, results=results[variant],
                                config=config, training_args={**run_args, "variant": variant}, base_model=base_model)
        url = push_to_hub(output_dir / variant, repo_id, card=rendered, private=hub_args.hub_private)
        print(f"pushed {variant} to {url}")
