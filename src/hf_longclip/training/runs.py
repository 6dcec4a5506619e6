"""What every example script does around the shared loop, for each variant it compares: build, optionally wrap in
LoRA, train, merge, save atomically, reload the saved checkpoint through `AutoModel(trust_remote_code=True)` (so
what is evaluated is what users load), evaluate; then write `results.json` and the loss curves, print the table and
push each checkpoint with its model card.

    run = start_run("train_x", ScriptArguments, LOOP_DEFAULTS, backbone=BackboneArguments)
    results, histories = train_variants(run.accelerator, variants, build, evaluate, dataset, run.loop_args, ...)
    publish(run.accelerator, results, histories, ...)

A script keeps only what is its own: its arguments, its data, and the method it trains (`hf_longclip.recipes`:
how each variant is built and evaluated, its card, its plots). `run_over_seeds` repeats a script's whole run for
each seed of `--seeds` and reports every table cell as mean +- std (`hf_longclip.training.results`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from transformers import AutoModel, HfArgumentParser

from ..fileio import naming_damaged_weights, write_atomic
from ..modeling_common.dual_encoder import load_clip_model
from ..plots import plot_loss_curves, plot_seed_summary
from .arguments import LoopArguments, run_signature
from .checkpoint import (
    ARGUMENTS,
    check_arguments,
    checkpoint_problem,
    list_checkpoints,
    read_state,
    resolve_resume,
)
from .hub import ModelCardInfo, build_model_card, push_to_hub, training_eval_results
from .loop import make_accelerator, save_model, train, whole_model_init
from .lora import LoraArguments, apply_lora, count_parameters, merge_lora
from .provenance import provenance
from .results import format_table, summarize_seeds
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
class Run:
    """What `start_run` gives a script: its own arguments (`script_args`), where its towers come from (`backbone`,
    None for a script whose own arguments describe its models), the loop's, LoRA's and the Hub's arguments, the
    accelerator with its trackers started, and `run_args`, every argument by name (for trackers, checkpoints and
    model cards)."""

    script_args: Any
    backbone: Any
    loop_args: LoopArguments
    lora_args: LoraArguments
    hub_args: HubArguments
    accelerator: Accelerator
    run_args: dict


def start_run(name: str, script_arguments: type, defaults: Mapping[str, Any], backbone: type | None = None) -> Run:
    """What every script does first: parse its own arguments with `backbone` (an arguments dataclass saying where
    its towers come from, with `init_from_clip`: e.g. `hf_longclip.miniature.BackboneArguments`), `LoopArguments`,
    `LoraArguments` and `HubArguments` (`defaults` override theirs), make the accelerator, check the output
    directory and start its trackers under `name`."""
    groups = (script_arguments, *((backbone,) if backbone else ()), LoopArguments, LoraArguments, HubArguments)
    parser = HfArgumentParser(groups)
    parser.set_defaults(**defaults)
    parsed = parser.parse_args_into_dataclasses()
    script_args, loop_args, lora_args, hub_args = parsed[0], *parsed[-3:]
    backbone_args = parsed[1] if backbone else None
    accelerator = make_accelerator(loop_args)
    if backbone_args is not None:
        warn_synthetic_fine_tuning(backbone_args.init_from_clip, loop_args)
    run_args = {key: value for group in parsed for key, value in asdict(group).items()}
    check_output_dir(loop_args, run_signature(loop_args, accelerator.num_processes, run_args)["run"])
    accelerator.init_trackers(name, config=run_args)
    return Run(script_args, backbone_args, loop_args, lora_args, hub_args, accelerator, run_args)


def warn_synthetic_fine_tuning(pretrained: str | None, loop_args: LoopArguments) -> None:
    """Say loudly (a warning) when a pretrained model (`pretrained`: the script's --init_from_clip, --base_checkpoint
    or --init_from_checkpoint) is given without --train_shards: the script then fine-tunes it on its synthetic scenes
    with its demo hyperparameters and evaluates it on them."""
    if pretrained and not loop_args.train_shards:
        logger.warning(
            f"{pretrained} will be fine-tuned on the SYNTHETIC SCENES (small rendered shapes with generated "
            f"captions), with this script's demo hyperparameters, and evaluated on them: a check of the pipeline, not "
            f"a useful model. For your own data: `hf-longclip shard my.csv shards/`, then --train_shards "
            f"'shards/{{00000..N}}.tar' with the paper's hyperparameters (docs/training.md)", main_process_only=True)


def check_output_dir(loop_args: LoopArguments, run_signature_part: dict) -> None:
    """Before any work, stop (SystemExit) where the loop would refuse a run under `loop_args.output_dir` (every
    `checkpoints/<run>/` below it, `--seeds` runs included): checkpoints there but no `--resume_from_checkpoint` (nor
    `--overwrite_output_dir`), `latest` with only invalid ones, or a checkpoint to resume whose script arguments
    (`run_signature_part`, the signature's "run" group) differ, unless `--allow_changed_arguments`. The loop checks
    the same per run, with the loop's arguments as each run uses them. A cached base's own checkpoints (under a
    `hf_longclip.miniature.cached_pretraining` root, marked by its `BASE_FILE`) are the base's, not this run's: its
    build checks them."""
    runs = sorted({path.parent for path in Path(loop_args.output_dir).glob("**/checkpoints/*/step_*")
                   if not (path.parent.parent.parent / BASE_FILE).is_file()})
    resume = loop_args.resume_from_checkpoint
    try:
        resumed = [Path(resume)] if resume and resume != "latest" else []
        for run_dir in runs if not resumed else []:
            path = resolve_resume(run_dir, resume, loop_args.overwrite_output_dir)
            resumed += [path] if path is not None else []
        for path in resumed:
            if checkpoint_problem(path) is None:
                check_arguments(read_state(path)[ARGUMENTS], {"run": run_signature_part},
                                f"cannot resume from {path}", loop_args.allow_changed_arguments)
    except ValueError as error:
        raise SystemExit(str(error)) from None


BASE_FILE = "base.json"  # what a cached pretrained base was built from, in its root (`miniature.cached_pretraining`)


def load_clip(path: str, trust_remote_code: bool = False):
    """A `CLIPModel` (ours or transformers') from a directory or Hub id, in float32 (`load_clip_model`: code the
    checkpoint ships runs only with `trust_remote_code`); a clear exit otherwise."""
    try:
        with naming_damaged_weights(path):
            return load_clip_model(path, trust_remote_code, dtype=torch.float32)
    except ValueError as error:  # not a CLIPModel, or a checkpoint that needs its own code
        hint = "\n(--trust_remote_code runs it: only for code you trust)" if "trust_remote_code" in str(error) else ""
        raise SystemExit(f"{error}{hint}") from None


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
    phase: str = "",
    run_args: Mapping[str, Any] | None = None,
) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """Train, save and evaluate each variant; return {variant: metrics} and {variant: history}. `phase` prefixes the
    progress bar's label (e.g. "base pretraining"), so a base is not mistaken for a fine-tuned variant.

    `build(variant) -> (task, processor)` is called with every variant built whole (also under ZeRO-3) from the
    same seed; `evaluate(model, processor)` runs on the main process on the checkpoint reloaded with
    `auto_class.from_pretrained(..., trust_remote_code=True)` (the code this run just saved beside the weights: what
    users of the checkpoint run); its metrics gain `train_seconds`. `run_args`: the script's arguments (`start_run`),
    those that shape the run saved with each checkpoint and evaluation (`run_signature`). A resumed run
    (`--resume_from_checkpoint`) skips variants whose evaluation is already written, if their arguments match, and
    says so. Each finished variant prints its metrics at once: a run stopped early (a timeout) leaves the rows it
    finished.
    """
    if lora_args.lora_r > 0 and getattr(accelerator.state.deepspeed_plugin, "zero_stage", None) == 3:
        raise SystemExit("LoRA under ZeRO-3 is not supported (merging needs whole weights): use ZeRO-2 or DDP")
    output_dir = Path(loop_args.output_dir)
    signature = run_signature(loop_args, accelerator.num_processes, run_args)
    eval_files = {variant: output_dir / "eval" / f"{variant}.json" for variant in variants}  # each written last
    check_finished_variants(eval_files, loop_args)
    results, histories = {}, {}
    for variant in variants:
        eval_file = eval_files[variant]
        if loop_args.resume_from_checkpoint and eval_file.is_file():
            finished = json.loads(eval_file.read_text())
            check_arguments(finished.get(ARGUMENTS, {}), signature,
                            f"cannot reuse the finished {variant} ({eval_file})", loop_args.allow_changed_arguments)
            longer = extended_length(finished, loop_args)
            if longer is None:
                results[variant], histories[variant] = finished["results"], finished["history"]
                accelerator.print(f"{variant}: finished in an earlier run, skipped ({eval_file})")
                continue
            run_dir = output_dir / "checkpoints" / variant
            if not any(checkpoint_problem(path) is None for path in list_checkpoints(run_dir)):
                raise SystemExit(
                    f"{variant} finished in an earlier run ({eval_file}) and {longer}, but it kept no valid "
                    f"checkpoint in {run_dir} (--checkpointing_steps 0?), so its optimizer state is gone and it "
                    f"cannot train on: pass --overwrite_output_dir to train it afresh for the new length, or keep its "
                    f"length")
            accelerator.print(f"{variant}: finished in an earlier run and {longer}: training on from its last "
                              f"checkpoint in {run_dir} (the cosine schedule is recomputed for the new length)")
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
                                          eval_dataset=dataset["validation"], run_arguments=run_args,
                                          progress_label=f"{phase} {variant}".strip())
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
            write_atomic(eval_file, json.dumps({"results": results[variant], "history": histories[variant],
                                                ARGUMENTS: signature, LENGTH: run_length(loop_args)}))
            scalars = ", ".join(f"{key} {value:.2f}" if isinstance(value, float) else f"{key} {value}"
                                for key, value in results[variant].items()
                                if isinstance(value, int | float) and key != "train_seconds")
            print(f"{phase} {variant}".strip() + f" done in {seconds:.0f} s" + (f": {scalars}" if scalars else ""),
                  flush=True)
        accelerator.wait_for_everyone()
        accelerator.free_memory()
    return results, histories


LENGTH = "length"  # how long a finished variant was asked to train, in its eval file (`run_length`)


def run_length(loop_args: LoopArguments) -> dict:
    """The argument that set a run's length: {"max_steps": N} when positive, else {"num_train_epochs": E}."""
    if loop_args.max_steps > 0:
        return {"max_steps": loop_args.max_steps}
    return {"num_train_epochs": loop_args.num_train_epochs}


def extended_length(finished: Mapping, loop_args: LoopArguments) -> str | None:
    """How this run's length differs from a finished variant's (its eval file, `finished`), e.g. "--max_steps 300 ->
    600", or None when it is the same."""
    now, before = run_length(loop_args), finished[LENGTH]
    if before == now:
        return None
    (old_name, old_value), (name, value) = next(iter(before.items())), next(iter(now.items()))
    return f"--{old_name} {old_value} -> --{name} {value}"


def check_finished_variants(eval_files: Mapping[str, Path], loop_args: LoopArguments) -> None:
    """Stop (SystemExit) before a rerun retrains and overwrites variants an earlier run finished (their eval files
    exist), unless --resume_from_checkpoint (reuse them, or train on where the length grew) or
    --overwrite_output_dir (train them afresh)."""
    finished = {variant: path for variant, path in eval_files.items() if path.is_file()}
    if finished and not loop_args.resume_from_checkpoint and not loop_args.overwrite_output_dir:
        raise SystemExit(
            f"{loop_args.output_dir} holds {', '.join(finished)}, finished in an earlier run "
            f"({', '.join(str(path) for path in finished.values())}): pass --resume_from_checkpoint latest to keep "
            f"them (and train on from their last checkpoint where --max_steps or --num_train_epochs grew), "
            f"--overwrite_output_dir to train them afresh, or another --output_dir")


def run_over_seeds(accelerator: Accelerator, loop_args: LoopArguments, hub_args: HubArguments,
                   run: Callable[[LoopArguments], Mapping[str, Mapping[str, float]]], metrics: Sequence[str],
                   name: str = "summary", title: str = "") -> dict | None:
    """A script's whole run, `run(loop_args) -> {variant: metrics}`, once with `--seed` or, with `--seeds 0,1,2`, once
    per seed with that seed and its own `<output_dir>/seed-<s>/` (each resumable). Then, on the main process,
    `<output_dir>/<name>.json` (every seed's results, `summarize_seeds` and the run's `provenance`) and, for several
    seeds, `<name>.png` (each
    metric's mean, std and seeds per variant) and the table of mean +- std on stdout (one seed: the run's own table
    says it all). Returns the summary (main process)."""
    seeds = loop_args.seed_list()
    if len(seeds) > 1 and hub_args.push_to_hub:
        raise SystemExit("--push_to_hub with several --seeds would push each seed's checkpoints to the same repos: "
                         "push one seed's run")
    output_dir = Path(loop_args.output_dir)
    started, origin = time.perf_counter(), provenance(accelerator.num_processes, seeds=seeds or [loop_args.seed])
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
         "runs": {str(seed): results for seed, results in runs.items()},
         "provenance": {**origin, "wall_seconds": round(time.perf_counter() - started, 1)}}, indent=2))
    if len(runs) > 1:
        plot_seed_summary(summary, metrics, output_dir / f"{name}.png", title or f"{name}: {len(runs)} seeds")
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
    loss_notes: Mapping[str, str] | None = None,
) -> None:
    """Main process: `results.json`, `loss_curves.png`, the table on stdout (`metrics`, then the training seconds)
    and, with `--push_to_hub`, each variant's
    checkpoint pushed with its card (`run_args`: every argument of the run, shown in the card; `push_variants`: the
    variants to push, default all, e.g. to leave out a row whose checkpoint this run did not write; `loss_notes`: see
    `plot_loss_curves`)."""
    if not accelerator.is_main_process:
        return
    output_dir = Path(output_dir)
    (output_dir / "results.json").write_text(json.dumps({"results": results, "training": histories}, indent=2))
    plot_loss_curves(histories, output_dir / "loss_curves.png", notes=loss_notes)
    trained = any("train_seconds" in values for values in results.values())
    print(format_table(results, [*metrics, *(["train_seconds"] if trained else [])]))
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
        url = push_to_hub(output_dir / variant, repo_id, card=rendered, private=hub_args.hub_private,
                          eval_results=training_eval_results(results[variant], repo_id, config))
        print(f"pushed {variant} to {url}")
