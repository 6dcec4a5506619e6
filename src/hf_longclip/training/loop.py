"""The one Accelerate training loop the example scripts share: single process, DDP or DeepSpeed ZeRO-2/3, with
gradient accumulation, gradient caching (`gradient_cache`), checkpointing, mixed precision, periodic validation,
trackers, exact resume and the whole step compiled (`--torch_compile`, `compile`). Its flags are
`arguments.LoopArguments`; AdamW's parameter groups come from `optimizer`, batches streamed from shards from
`streaming`."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.data_loader import SeedableRandomSampler
from accelerate.logging import get_logger
from accelerate.utils import (
    DistributedDataParallelKwargs,
    DistributedType,
    InitProcessGroupKwargs,
    parse_flag_from_env,
    set_seed,
)
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup
from transformers.integrations import (
    is_deepspeed_zero3_enabled,
    unset_hf_deepspeed_config,
)

from ..data.caption_files import describe_truncation
from .arguments import LoopArguments, run_signature
from .caption_counts import CaptionCountingCollator, add_counts, all_processes, new_counts
from .checkpoint import (
    ARGUMENTS,
    TASK_FILES,
    check_arguments,
    read_process_state,
    read_state,
    resolve_resume,
    save_checkpoint,
    write_atomic_directory,
)
from .compile import compile_options, compile_step
from .gradient_cache import cached_backward
from .optimizer import lock_towers, parameter_groups
from .task import Task, sum_of_terms

logger = get_logger(__name__)


def make_accelerator(args: LoopArguments) -> Accelerator:
    """The Accelerator for `args` under whatever `accelerate launch` configured (DDP, DeepSpeed, precision).

    Without CUDA, several processes need `cpu=True` to form a gloo group (accelerate 1.15 otherwise gives each
    its own unsynchronised run, even under `--multi_gpu`), and DeepSpeed is told to use gloo (it asks for NCCL).
    Under DeepSpeed, the script's gradient accumulation and clipping are written into the DeepSpeed config, which
    otherwise overrides them. The library's log records (each logged training step) show at info level on the main
    process, warnings only elsewhere.
    """
    no_cuda, deepspeed = not torch.cuda.is_available(), parse_flag_from_env("ACCELERATE_USE_DEEPSPEED")
    several_processes = int(os.environ.get("WORLD_SIZE", "1")) > 1
    handlers = [InitProcessGroupKwargs(backend="gloo")] if no_cuda and deepspeed else []
    if args.ddp_find_unused_parameters:
        handlers.append(DistributedDataParallelKwargs(find_unused_parameters=True))
    log_with = None if args.report_to == "none" else args.report_to
    accelerator = Accelerator(
        cpu=no_cuda and several_processes and not deepspeed,  # else accelerate 1.15 runs unsynchronised copies
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=log_with,
        project_dir=args.output_dir,
        kwargs_handlers=handlers,
    )
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        config = accelerator.state.deepspeed_plugin.deepspeed_config
        config["gradient_accumulation_steps"] = args.gradient_accumulation_steps
        config["gradient_clipping"] = args.max_grad_norm
    _show_library_logs(logging.INFO if accelerator.is_main_process else logging.WARNING)
    return accelerator


def _show_library_logs(level: int) -> None:
    """Python shows only warnings of loggers nobody configured: give the library's loggers a handler and `level`."""
    library_logger = logging.getLogger(__name__.split(".")[0])
    if not library_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        library_logger.addHandler(handler)
    library_logger.setLevel(level)


class LossWindow:
    """Sums of the loss and of its terms since the last logged step, kept on the device (no host sync per step),
    so that each logged value is the mean over its logging window; part of a checkpoint's per-process state."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, loss: torch.Tensor, terms: dict[str, torch.Tensor]) -> None:
        for name, value in ({"loss": loss, **terms} if len(terms) > 1 else {"loss": loss}).items():
            value = value.detach().float()
            self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.count += 1

    def means(self, accelerator: Accelerator) -> dict[str, float]:
        """The window's means, averaged over processes; the window starts afresh."""
        means = {name: accelerator.reduce(total / self.count, reduction="mean").item()
                 for name, total in self.sums.items()}
        self.sums, self.count = {}, 0
        return means

    def state_dict(self) -> dict:
        return {"sums": self.sums, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.sums, self.count = state["sums"], state["count"]


@contextlib.contextmanager
def whole_model_init(accelerator: Accelerator):
    """Build (or load) models whole inside this context, even under ZeRO-3, where transformers would otherwise
    partition them at construction (`deepspeed.zero.Init`, a collective): needed for `from_clip`'s position
    stretching, for an initialisation identical to a single-process run, and to reload a checkpoint on the main
    process alone. Models too large for one device should be built outside it."""
    plugin = accelerator.state.deepspeed_plugin
    if plugin is None or not is_deepspeed_zero3_enabled():
        yield
        return
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        plugin.set_deepspeed_weakref()


@torch.no_grad()
def validation_loss(task: Task, model, dataset: Dataset, batch_size: int, accelerator: Accelerator) -> float:
    """Mean training objective over `dataset`, every process evaluating its shard (works under ZeRO-3)."""
    loader = accelerator.prepare_data_loader(
        DataLoader(dataset, batch_size=batch_size, drop_last=True, collate_fn=task.collate_fn)
    )
    was_training = model.training
    model.eval()
    total, count = torch.zeros((), device=accelerator.device), 0
    for batch in loader:
        total += sum_of_terms(task.compute_loss(model, batch)).float()
        count += 1
    model.train(was_training)
    if count == 0:
        raise ValueError(f"{len(dataset)} validation samples make no full batch of {batch_size} per process")
    return accelerator.reduce(total / count, reduction="mean").item()


def optimizer_step(task: Task, model, batch: dict, optimizer: torch.optim.Optimizer, accelerator: Accelerator,
                   max_grad_norm: float = 0.0, chunk: int = 0, steps: Mapping[str, Callable] | None = None
                   ) -> dict[str, torch.Tensor]:
    """The loop's work on one batch, inside `accelerator.accumulate`: the task's loss and its backward, or gradient
    caching's two passes in chunks of `chunk` samples (`gradient_cache.cached_backward`); gradient clipping to
    `max_grad_norm` (0: none) where gradients are synchronised; the optimizer's step and `zero_grad`. `steps` stand
    in for the task's `device_step`, `encode` and `loss` (the loop's compiled ones, the memory planner's marked
    ones). Returns the loss terms."""
    steps = steps or {}
    if chunk:
        terms = cached_backward(task, model, batch, chunk, accelerator, steps.get("encode"), steps.get("loss"))
    else:
        device_step = steps.get("device_step")  # a task may override compute_loss without it
        terms = task.compute_loss(model, batch, device_step) if device_step else task.compute_loss(model, batch)
        accelerator.backward(sum_of_terms(terms))
    if accelerator.sync_gradients and max_grad_norm > 0:
        accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return terms


def train(
    task: Task,
    train_dataset: Dataset,
    args: LoopArguments,
    accelerator: Accelerator,
    run_name: str = "train",
    eval_dataset: Dataset | None = None,
    progress_label: str | None = None,
    run_arguments: Mapping[str, Any] | None = None,
) -> tuple[torch.nn.Module, list[dict]]:
    """Train `task.model` on the sum of `task.compute_loss`'s terms (see `hf_longclip.training.task`).

    Returns the prepared (wrapped) model, for `save_model`, and the logged history (at step 1, every
    `logging_steps` and the last step: the loss and each of its terms, mean over the logging window and the
    processes, learning rate, what `task.after_optimizer_step` reports, and the validation
    loss every `eval_steps`). Checkpoints go to `<output_dir>/checkpoints/<run_name>/`;
    `args.resume_from_checkpoint` continues from there exactly: same weights, optimizer, schedule, RNG states,
    data order and task state as a run that was never interrupted. Nothing is deleted unless
    `args.overwrite_output_dir` (`checkpoint.resolve_resume` says when a run is refused), and a resume whose
    arguments that shape the run (`args`, the script's `run_arguments`, the number of processes: `run_signature`)
    differ from the checkpoint's is refused unless `args.allow_changed_arguments`. With `args.train_shards` the
    training data is streamed from those shards (`StreamedBatches`) and `train_dataset` is not used. With
    `args.contrastive_batch_size` each batch holds that many samples per process and its gradient is computed in
    chunks of `args.per_device_train_batch_size` (`gradient_cache.cached_backward`).
    """
    if args.contrastive_batch_size and getattr(accelerator.state.deepspeed_plugin, "zero_stage", None) == 3:
        raise ValueError("gradient caching (--contrastive_batch_size) runs on one process, DDP or DeepSpeed ZeRO-1/2, "
                         "not ZeRO-3 (its objective uses parameters outside the forward)")
    set_seed(args.seed)
    model = task.model
    lock_towers(model, args)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    groups = parameter_groups(model, args.weight_decay, args.learning_rate, args.lr_multipliers, args.layer_decay)
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, args.adam_beta2),
                                  eps=args.adam_epsilon)
    # the history logs the rate of factor 1 (the scheduler reports the first group's, the largest factor's)
    first_group_factor = groups[0]["lr"] / args.learning_rate if "lr" in groups[0] and args.learning_rate else 1.0
    if args.train_shards:  # streamed: the loader is ours (each process reads its own shards), not accelerate's
        from .streaming import StreamedBatches  # torchdata, braceexpand: the extra `hf-longclip[shards]`

        loader = StreamedBatches(args, task.collate_fn, accelerator)
        if accelerator.distributed_type == DistributedType.DEEPSPEED:  # no loader for accelerate to read it from
            accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = \
                args.process_batch_size
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        # accelerate's seedable sampler: epoch e's order is a randperm of a CPU generator seeded with data_seed + e,
        # a function of (seed, epoch) only, so a resumed run sees the order of an uninterrupted one (given its own
        # generator, accelerate draws none from the global RNG). Under several processes accelerate shards its
        # batches: process p gets batches p, p + P, ..., the global batch of one process with P times the batch.
        sampler = SeedableRandomSampler(train_dataset, generator=torch.Generator(), data_seed=args.seed * 1_000_003)
        loader = DataLoader(
            train_dataset,
            batch_size=args.process_batch_size,
            sampler=sampler,
            drop_last=True,  # the contrastive gather needs equal batches on every process
            collate_fn=CaptionCountingCollator(task.collate_fn),  # (batch, the texts its processor cut)
            num_workers=args.dataloader_num_workers,
        )
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        if len(loader) == 0:
            raise ValueError(
                f"{len(train_dataset)} training samples make no full batch of "
                f"{args.process_batch_size} x {accelerator.num_processes} processes"
            )
    compiled = {}  # the whole step's device work, compiled: encoders and objective (see `compile`)
    options = compile_options(args, accelerator)
    if options is not None:
        if type(task).compute_loss is not Task.compute_loss:
            raise ValueError(f"--torch_compile compiles a task's device_step, but {type(task).__name__} overrides "
                             f"compute_loss: define encode and loss (hf_longclip.training.task) instead")
        compiled = {name: compile_step(getattr(task, name), **options) for name in ("device_step", "encode", "loss")}
    steps_per_epoch = math.ceil(len(loader) / args.gradient_accumulation_steps)
    total_steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * steps_per_epoch)
    # accelerate steps a prepared scheduler once per process at each optimizer step, except under DeepSpeed,
    # whose engine steps it once: the factor makes the schedule follow optimizer steps on every engine.
    per_step = 1 if accelerator.distributed_type == DistributedType.DEEPSPEED else accelerator.num_processes
    scheduler = accelerator.prepare(get_cosine_schedule_with_warmup(
        optimizer, min(args.warmup_steps, total_steps // 2) * per_step, total_steps * per_step
    ))

    run_dir = Path(args.output_dir) / "checkpoints" / run_name
    step, epoch, batches_done, history, window = 0, 0, 0, [], LossWindow()
    captions = loader.caption_counts if args.train_shards else new_counts()  # texts cut to the model's length
    signature = run_signature(args, accelerator.num_processes, run_arguments)
    resume = resolve_resume(run_dir, args.resume_from_checkpoint, args.overwrite_output_dir)
    if resume is not None:
        state = read_state(resume)
        check_arguments(state[ARGUMENTS], signature, f"cannot resume {run_name} from {resume}",
                        args.allow_changed_arguments)
        accelerator.load_state(str(resume))
        step, epoch, batches_done, history = (state["step"], state["epoch"], state["batches_in_epoch"],
                                              state["history"])
        check_resumed_length(run_name, step, state["total_steps"], total_steps)
        process_state = read_process_state(resume, accelerator.process_index)
        task.load_state_dict(process_state["task"])
        window.load_state_dict(process_state["loss_window"])
        if args.train_shards:
            loader.load_state_dict(process_state["data_loader"], epoch)
            captions = loader.caption_counts
        else:
            captions.update(process_state["caption_counts"])
        logger.info(f"{run_name}: resumed from {resume} at step {step}", main_process_only=True)
    elif run_dir.exists() and accelerator.is_main_process:  # checkpoints only with --overwrite_output_dir
        logger.warning(f"{run_name}: starting afresh, removing {run_dir}")
        shutil.rmtree(run_dir)
    accelerator.wait_for_everyone()
    task.restore_files(None if resume is None else resume / TASK_FILES, accelerator)

    progress = tqdm(total=total_steps, initial=step, desc=progress_label or run_name,
                    disable=not accelerator.is_local_main_process)
    model.train()
    while step < total_steps:
        if args.train_shards:
            batches = loader.epoch(epoch)  # from the loaded position when resumed
        else:
            if batches_done >= len(loader):
                epoch, batches_done = epoch + 1, 0
            batches = accelerator.skip_first_batches(loader, batches_done) if batches_done else loader
            batches.set_epoch(epoch)  # accelerate's loaders hand their own epoch count to the sampler at each pass
            # but not past skip_first_batches' wrapper of a sharded batch sampler (a resume mid-epoch under several
            # processes would replay epoch 0's order)
            sampler.set_epoch(epoch)
        for batch in batches:
            if not args.train_shards:
                batch, counts = batch
                add_counts(captions, counts)
            with accelerator.accumulate(model):
                terms = optimizer_step(task, model, batch, optimizer, accelerator, args.max_grad_norm,
                                       args.per_device_train_batch_size if args.contrastive_batch_size else 0,
                                       compiled)
                window.add(sum_of_terms(terms), terms)
                scheduler.step()
            batches_done += 1
            if not accelerator.sync_gradients:
                continue
            step += 1
            progress.update(1)
            updates = task.after_optimizer_step(model, accelerator)
            record = {}
            if step == 1 or step % args.logging_steps == 0 or step == total_steps:
                record.update(window.means(accelerator), lr=scheduler.get_last_lr()[0] / first_group_factor,
                              **{key: float(value) for key, value in updates.items()})
                if args.train_shards:  # skipped by every process so far
                    corrupt = torch.tensor(loader.corrupt_samples, device=accelerator.device)
                    record["corrupt_samples"] = int(accelerator.reduce(corrupt, reduction="sum").item())
                cut = all_processes(captions, accelerator)  # every process's, so far
                if cut["texts"]:
                    record.update(texts_truncated=cut["truncated"], text_tokens_cut=cut["tokens_cut"])
                progress.set_postfix(loss=f"{record['loss']:.3f}")
            if eval_dataset is not None and args.eval_steps > 0 and (step % args.eval_steps == 0
                                                                     or step == total_steps):
                record["eval_loss"] = validation_loss(task, model, eval_dataset, args.per_device_eval_batch_size,
                                                      accelerator)
            if record:
                history.append({"step": step, **record})
                accelerator.log({f"{run_name}/{key}": value for key, value in record.items()}, step=step)
                logger.info(f"{run_name} step {step}/{total_steps} {record}", main_process_only=True)
            if args.checkpointing_steps > 0 and (step % args.checkpointing_steps == 0 or step == total_steps):
                state = {"epoch": epoch, "batches_in_epoch": batches_done, "history": history,
                         "run_name": run_name, "total_steps": total_steps, ARGUMENTS: signature}
                process_state = {"task": task.state_dict(), "loss_window": window.state_dict(),
                                 **({"data_loader": loader.state_dict()} if args.train_shards else
                                    {"caption_counts": dict(captions)})}
                save_checkpoint(accelerator, run_dir, step, state, process_state, args.save_total_limit,
                                lambda directory: task.save_files(directory, accelerator))
            if step >= total_steps:
                break
        else:
            if args.train_shards:  # the stream ran out: the next epoch
                epoch, batches_done = epoch + 1, 0
    progress.close()
    cut = all_processes(captions, accelerator)
    if cut["texts"]:  # once per run
        logger.info(f"{run_name}: {describe_truncation(cut, 'training texts')}", main_process_only=True)
    accelerator.wait_for_everyone()
    return model, history


def check_resumed_length(run_name: str, step: int, saved_total: int, total_steps: int) -> None:
    """A resume may lengthen a run (--max_steps, --num_train_epochs), never shorten it past its checkpoint's step
    (ValueError). Where the length changed, the warmup-cosine schedule is the one of the new length, evaluated from
    the resumed step on (no new warmup; a finished run, whose rate had decayed to 0, goes on at the new curve's
    rate there): said in a warning."""
    if step > total_steps:
        raise ValueError(f"{run_name}: the checkpoint is at step {step}, past this run's {total_steps} steps: a resume "
                         f"can lengthen a run (--max_steps, --num_train_epochs), not shorten it")
    if saved_total != total_steps:
        logger.warning(f"{run_name}: the run's length changed from {saved_total} to {total_steps} steps: training on "
                       f"from step {step}, the learning rate follows the warmup-cosine schedule of {total_steps} "
                       f"steps from there (no new warmup)", main_process_only=True)


def save_model(accelerator: Accelerator, model: torch.nn.Module, directory: str | Path, processor=None) -> Path:
    """Write a `from_pretrained` checkpoint (safetensors, code files, processor) atomically, from any engine:
    under ZeRO-3 every process takes part in gathering the weights (`accelerator.get_state_dict`)."""
    state_dict = accelerator.get_state_dict(model)  # collective under ZeRO-3; None on the other processes there

    def write(temp: Path) -> None:
        if accelerator.is_main_process:
            accelerator.unwrap_model(model).save_pretrained(temp, state_dict=state_dict)
            if processor is not None:
                processor.save_pretrained(temp)

    return write_atomic_directory(Path(directory), write, accelerator.is_main_process, accelerator.wait_for_everyone)
