"""The one Accelerate training loop the example scripts share: single process, DDP or DeepSpeed ZeRO-2/3, with
gradient accumulation, checkpointing, mixed precision, periodic validation, trackers and exact resume."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import (
    DistributedDataParallelKwargs,
    DistributedType,
    InitProcessGroupKwargs,
    parse_flag_from_env,
    set_seed,
)
from torch.utils.data import DataLoader, Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup
from transformers.integrations import (
    is_deepspeed_zero3_enabled,
    unset_hf_deepspeed_config,
)

from ..data.shards import SKIPPED, ShardStream, expand_shards, shard_sample_counts
from .checkpoint import (
    TASK_FILES,
    read_process_state,
    read_state,
    resolve_resume,
    save_checkpoint,
    write_atomic_directory,
)
from .task import Task, sum_of_terms

logger = get_logger(__name__)


@dataclass
class LoopArguments:
    """Optimisation, checkpointing and logging settings shared by every example script (HfArgumentParser turns
    them into flags)."""

    output_dir: str = field(default="outputs", metadata={"help": "where checkpoints and results go"})
    seed: int = field(default=0, metadata={"help": "seed of model init, data order and dropout"})
    seeds: str = field(default="", metadata={
        "help": "comma list of seeds, e.g. '0,1,2': the whole run once per seed, each under <output_dir>/seed-<s>/, "
                "then every table cell as mean +- std over them ('': one run with --seed)"})
    num_train_epochs: float = field(default=1.0, metadata={"help": "passes over the training split"})
    max_steps: int = field(default=-1, metadata={"help": "if > 0, stop after this many optimizer steps (overrides "
                                                         "epochs)"})
    per_device_train_batch_size: int = field(default=64, metadata={"help": "batch per process (contrastive "
                                                                           "losses see the global batch)"})
    per_device_eval_batch_size: int = field(default=128, metadata={"help": "batch per process for the validation "
                                                                          "loss and the final evaluation"})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "optimizer step every N micro-batches. The contrastive loss still sees one micro-batch of "
                "negatives per process: this saves memory, it does not enlarge the contrastive batch"})
    learning_rate: float = field(default=5e-4, metadata={"help": "peak AdamW learning rate, reached after the "
                                                                 "warmup, then cosine decay to 0"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decay of matrices (not of biases, norms, "
                                                               "scales)"})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW beta2 (beta1 is 0.9)"})
    lr_multipliers: str = field(default="", metadata={
        "help": "per-module learning-rate factors, comma-separated 'prefix=factor' matched against parameter "
                "names (dot-separated components; the longest matching prefix wins; unmatched parameters keep "
                "1), e.g. 'vision_model=0.01,text_model=0.1' (DITM's per-tower multipliers). '': none"})
    layer_decay: float = field(default=1.0, metadata={
        "help": "layer-wise learning-rate decay in (0, 1], per transformer tower (a module holding "
                "'encoder.layers.<i>'): with L blocks, its embeddings and pre-norm are layer 0, block i is "
                "layer i+1 and its other parameters (final norm) layer L+1; layer l gets decay^(L+1-l). "
                "Multiplies lr_multipliers; parameters outside towers keep 1. 1.0: off"})
    warmup_steps: int = field(default=50, metadata={"help": "optimizer steps of linear warmup (at most half the "
                                                            "run)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (0: off); also DeepSpeed's"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
    ddp_find_unused_parameters: bool = field(default=False, metadata={
        "help": "let DDP handle parameters without a gradient in a step (e.g. a backbone frozen for a warm-up); "
                "costs a graph traversal per step"})
    mixed_precision: str | None = field(default=None, metadata={
        "help": "'no', 'fp16' or 'bf16'; None: what the accelerate launch config says"})
    logging_steps: int = field(default=20, metadata={"help": "log the loss terms and learning rate every N "
                                                             "optimizer steps (and at the first and last)"})
    report_to: str = field(default="none", metadata={"help": "accelerate trackers: 'tensorboard', 'wandb', "
                                                             "'all' or 'none'"})
    eval_steps: int = field(default=0, metadata={"help": "validation loss every N steps (0: never)"})
    checkpointing_steps: int = field(default=0, metadata={"help": "save the full training state every N steps "
                                                                  "(0: never)"})
    save_total_limit: int = field(default=2, metadata={"help": "keep the newest N checkpoints (0: all)"})
    train_shards: str | None = field(default=None, metadata={
        "help": "stream training data from WebDataset shards ('path/{00000..00127}.tar', local or hf://; written by "
                "`hf-longclip shard`) instead of the script's training split"})
    shuffle_buffer: int = field(default=1000, metadata={"help": "streamed samples shuffled together (--train_shards)"})
    dataloader_num_workers: int = field(default=0, metadata={
        "help": "data-loader worker processes that decode and preprocess (collate) training samples"})
    resume_from_checkpoint: str | None = field(default=None, metadata={
        "help": "'latest' (newest valid checkpoint of each run, if any) or a checkpoint directory"})

    def __post_init__(self):
        if self.gradient_accumulation_steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be >= 1, got {self.gradient_accumulation_steps}")
        if self.mixed_precision not in (None, "no", "fp16", "bf16"):
            raise ValueError(f"mixed_precision must be 'no', 'fp16' or 'bf16', got {self.mixed_precision!r}")
        for name in ("logging_steps", "per_device_train_batch_size", "per_device_eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        self.seed_list()  # malformed seed lists fail here
        parse_lr_multipliers(self.lr_multipliers)  # malformed specs fail here, unmatched prefixes at train
        check_layer_decay(self.layer_decay)


    def seed_list(self) -> list[int]:
        """The seeds of `--seeds`, distinct, in order; [] without it."""
        try:
            seeds = [int(text) for text in self.seeds.split(",") if text.strip()]
        except ValueError:
            raise ValueError(f"seeds must be a comma list of integers, got {self.seeds!r}") from None
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds!r}")
        return seeds


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


class EpochShuffleSampler(Sampler[int]):
    """A fresh random order each epoch that depends only on (seed, epoch), so a resumed run sees exactly the order
    of an uninterrupted one. Under several processes accelerate shards its batches: process p gets batches
    p, p + P, ..., so the global batch of a step holds the same samples as one process with P times the batch."""

    def __init__(self, num_samples: int, seed: int):
        self.num_samples, self.seed, self.epoch = num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        yield from torch.randperm(self.num_samples, generator=generator).tolist()


class StreamedBatches:
    """Training batches streamed from WebDataset shards (`args.train_shards`, see `hf_longclip.data.shards`): this
    process's shards through torchdata's `StatefulDataLoader` (`args.dataloader_num_workers` workers decode and
    collate), moved to the device. An epoch ends for every process when one of them runs out (one all-reduce of a
    flag per batch: shards need not hold equal counts and corrupt samples are skipped), and `len()` is the estimate
    from the shards' manifest that sizes the learning-rate schedule. `state_dict` holds the loader's per-worker
    positions and the count of corrupt samples skipped, for exact resume."""

    def __init__(self, args: LoopArguments, collate_fn, accelerator: Accelerator):
        urls = expand_shards(args.train_shards)
        rank, world = accelerator.process_index, accelerator.num_processes
        self.stream = ShardStream(urls, rank, world, seed=args.seed, buffer_size=args.shuffle_buffer)
        self.loader = StatefulDataLoader(
            self.stream, batch_size=args.per_device_train_batch_size, num_workers=args.dataloader_num_workers,
            collate_fn=_CountingCollator(collate_fn), drop_last=True,
            generator=torch.Generator().manual_seed(args.seed),  # worker seeds: not drawn from the training RNG
        )
        # datasets deals each process len(urls) / world shards anew each epoch (after shuffling their order): the
        # smallest share it can get is the sum of the smallest shards
        smallest = sum(sorted(shard_sample_counts(urls))[: len(urls) // world])
        workers = max(1, args.dataloader_num_workers)  # each drops its last partial batch
        self.estimated_batches = smallest // args.per_device_train_batch_size - (workers - 1)
        if self.estimated_batches < 1:
            raise ValueError(f"{smallest} samples in the smallest process's shards make no full batch of "
                             f"{args.per_device_train_batch_size} per worker ({workers} workers)")
        self.accelerator, self.corrupt_samples = accelerator, 0

    def __len__(self) -> int:
        return self.estimated_batches

    def epoch(self, epoch: int):
        """The batches of `epoch` (from the resume point if a state was loaded), on the device."""
        self.stream.set_epoch(epoch)
        device = self.accelerator.device
        for batch, skipped in _until_any_process_ends(iter(self.loader), self.accelerator):
            self.corrupt_samples += skipped
            yield {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}

    def state_dict(self) -> dict:
        return {"loader": self.loader.state_dict(), "corrupt_samples": self.corrupt_samples}

    def load_state_dict(self, state: dict, epoch: int) -> None:
        self.stream.set_epoch(epoch)
        self.loader.load_state_dict(state["loader"])
        self.corrupt_samples = state["corrupt_samples"]


@dataclass
class _CountingCollator:
    """The task's collate function on streamed rows, returning (batch, corrupt samples skipped before them)."""

    collate_fn: object

    def __call__(self, rows: list[dict]):
        skipped = sum(row.pop(SKIPPED) for row in rows)
        return self.collate_fn(rows), skipped


def _until_any_process_ends(iterator, accelerator: Accelerator):
    """Items of `iterator` while every process still has one."""
    while True:
        item = next(iterator, None)
        alive = torch.tensor([item is not None], dtype=torch.int64, device=accelerator.device)
        if accelerator.num_processes > 1:
            alive = accelerator.reduce(alive, reduction="sum") // accelerator.num_processes
        if not alive.item():
            return
        yield item


def parse_lr_multipliers(spec: str) -> dict[str, float]:
    """'vision_model=0.01,text_model=0.1' -> {'vision_model': 0.01, 'text_model': 0.1} ('' -> {})."""
    multipliers = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        prefix, sep, value = item.partition("=")
        prefix = prefix.strip().strip(".")
        try:
            factor = float(value) if sep else float("nan")
        except ValueError:
            factor = float("nan")
        if not prefix or not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"lr_multipliers: {item!r} is not 'prefix=factor' with a positive factor "
                             f"(in {spec!r})")
        if prefix in multipliers:
            raise ValueError(f"lr_multipliers: prefix {prefix!r} given twice (in {spec!r})")
        multipliers[prefix] = factor
    return multipliers


def check_layer_decay(decay: float) -> None:
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"layer_decay must be in (0, 1], got {decay}")


_WRAPPER_PREFIXES = ("module.", "base_model.model.", "_orig_mod.")  # DDP, peft, torch.compile
_BLOCK = re.compile(r"^(?P<tower>.+?)\.encoder\.layers\.(?P<block>\d+)\.")
_EMBEDDING_PARTS = ("embeddings", "pre_layrnorm", "pre_layernorm")


def _bare_name(name: str) -> str:
    stripped = True
    while stripped:
        stripped = False
        for prefix in _WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix):], True
    return name


def _has_prefix(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layer_decay_factors(names: list[str], decay: float) -> dict[str, float]:
    """BEiT-style layer-wise decay per tower; see `LoopArguments.layer_decay`. Names outside towers are absent."""
    depth = {}  # tower prefix -> number of blocks
    for name in names:
        match = _BLOCK.match(name)
        if match:
            depth[match["tower"]] = max(depth.get(match["tower"], 0), int(match["block"]) + 1)
    if not depth:
        raise ValueError("layer_decay != 1 but the model has no transformer tower ('<tower>.encoder.layers.<i>.')")
    factors = {}
    for name in names:
        match = _BLOCK.match(name)
        if match:
            tower, layer = match["tower"], int(match["block"]) + 1
        else:
            tower = next((t for t in sorted(depth, key=len, reverse=True) if name.startswith(t + ".")), None)
            if tower is None:
                continue
            first = name[len(tower) + 1:].split(".")[0]
            layer = 0 if first in _EMBEDDING_PARTS else depth[tower] + 1
        factors[name] = decay ** (depth[tower] + 1 - layer)
    return factors


def _parameter_groups(model: torch.nn.Module, weight_decay: float, learning_rate: float | None = None,
                      lr_multipliers: str = "", layer_decay: float = 1.0) -> list[dict]:
    """open_clip's split: decay matrices; leave 1-D parameters alone (biases, norm gains, class token, and the
    logit scale, a shape-(1,) parameter).

    With `lr_multipliers` or `layer_decay` (see `LoopArguments`), each trainable parameter gets a factor (its
    prefix's multiplier times its layer's decay, matched on names without DDP/peft wrapper prefixes) and the
    groups split further by factor, each with lr = learning_rate * factor: largest factor first, decay before
    no-decay within a factor, empty groups dropped. The cosine schedule scales every group's lr by the same
    lambda, so the ratios hold throughout. Without them: exactly two groups, decay then no-decay, no 'lr' key.
    """
    multipliers = parse_lr_multipliers(lr_multipliers)
    check_layer_decay(layer_decay)
    if not multipliers and layer_decay == 1.0:
        decay, no_decay = [], []
        for param in model.parameters():
            if not param.requires_grad:
                continue
            (no_decay if param.ndim < 2 else decay).append(param)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if learning_rate is None:
        raise ValueError("learning_rate is needed for lr_multipliers or layer_decay")

    named = [(_bare_name(name), param) for name, param in model.named_parameters()]
    names = [name for name, _ in named]
    unmatched = [prefix for prefix in multipliers if not any(_has_prefix(name, prefix) for name in names)]
    if unmatched:
        raise ValueError(f"lr_multipliers: prefix(es) {unmatched} match no parameter of the model (names look "
                         f"like {names[:3]})")
    layer_factors = _layer_decay_factors(names, layer_decay) if layer_decay != 1.0 else {}
    by_prefix_length = sorted(multipliers, key=len, reverse=True)

    groups: dict[tuple[float, bool], list] = {}
    for name, param in named:
        if not param.requires_grad:
            continue
        prefix = next((p for p in by_prefix_length if _has_prefix(name, p)), None)
        factor = (multipliers[prefix] if prefix is not None else 1.0) * layer_factors.get(name, 1.0)
        groups.setdefault((factor, param.ndim >= 2), []).append(param)
    return [
        {"params": params, "weight_decay": weight_decay if decays else 0.0, "lr": learning_rate * factor}
        for (factor, decays), params in sorted(groups.items(), key=lambda item: (-item[0][0], not item[0][1]))
    ]


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


def train(
    task: Task,
    train_dataset: Dataset,
    args: LoopArguments,
    accelerator: Accelerator,
    run_name: str = "train",
    eval_dataset: Dataset | None = None,
) -> tuple[torch.nn.Module, list[dict]]:
    """Train `task.model` on the sum of `task.compute_loss`'s terms (see `hf_longclip.training.task`).

    Returns the prepared (wrapped) model, for `save_model`, and the logged history (at step 1, every
    `logging_steps` and the last step: the loss and each of its terms, mean over the logging window and the
    processes, learning rate, what `task.after_optimizer_step` reports, and the validation
    loss every `eval_steps`). Checkpoints go to `<output_dir>/checkpoints/<run_name>/`;
    `args.resume_from_checkpoint` continues from there exactly: same weights, optimizer, schedule, RNG states,
    data order and task state as a run that was never interrupted. With `args.train_shards` the training data is
    streamed from those shards (`StreamedBatches`) and `train_dataset` is not used.
    """
    set_seed(args.seed)
    model = task.model
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = torch.optim.AdamW(
        _parameter_groups(model, args.weight_decay, args.learning_rate, args.lr_multipliers, args.layer_decay),
        lr=args.learning_rate, betas=(0.9, args.adam_beta2),
    )
    if args.train_shards:  # streamed: the loader is ours (each process reads its own shards), not accelerate's
        loader = StreamedBatches(args, task.collate_fn, accelerator)
        if accelerator.distributed_type == DistributedType.DEEPSPEED:  # no loader for accelerate to read it from
            accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = \
                args.per_device_train_batch_size
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        loader = DataLoader(
            train_dataset,
            batch_size=args.per_device_train_batch_size,
            sampler=EpochShuffleSampler(len(train_dataset), args.seed),
            drop_last=True,  # the contrastive gather needs equal batches on every process
            collate_fn=task.collate_fn,
            num_workers=args.dataloader_num_workers,
        )
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        if len(loader) == 0:
            raise ValueError(
                f"{len(train_dataset)} training samples make no full batch of "
                f"{args.per_device_train_batch_size} x {accelerator.num_processes} processes"
            )
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
    resume = resolve_resume(run_dir, args.resume_from_checkpoint)
    if resume is not None:
        accelerator.load_state(str(resume))
        state = read_state(resume)
        step, epoch, batches_done, history = (state["step"], state["epoch"], state["batches_in_epoch"],
                                              state["history"])
        process_state = read_process_state(resume, accelerator.process_index)
        task.load_state_dict(process_state["task"])
        window.load_state_dict(process_state["loss_window"])
        if args.train_shards:
            loader.load_state_dict(process_state["data_loader"], epoch)
        logger.info(f"{run_name}: resumed from {resume} at step {step}", main_process_only=True)
    elif run_dir.exists() and accelerator.is_main_process:
        logger.warning(f"{run_name}: starting afresh, removing old checkpoints in {run_dir}")
        shutil.rmtree(run_dir)
    accelerator.wait_for_everyone()
    task.restore_files(None if resume is None else resume / TASK_FILES, accelerator)

    progress = tqdm(total=total_steps, initial=step, desc=run_name, disable=not accelerator.is_local_main_process)
    model.train()
    while step < total_steps:
        if args.train_shards:
            batches = loader.epoch(epoch)  # from the loaded position when resumed
        else:
            if batches_done >= len(loader):
                epoch, batches_done = epoch + 1, 0
            batches = accelerator.skip_first_batches(loader, batches_done) if batches_done else loader
            batches.set_epoch(epoch)  # accelerate's loaders hand their own epoch count to the sampler at each pass
        for batch in batches:
            with accelerator.accumulate(model):
                terms = task.compute_loss(model, batch)
                loss = sum_of_terms(terms)
                window.add(loss, terms)
                accelerator.backward(loss)
                if accelerator.sync_gradients and args.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            batches_done += 1
            if not accelerator.sync_gradients:
                continue
            step += 1
            progress.update(1)
            updates = task.after_optimizer_step(model, accelerator)
            record = {}
            if step == 1 or step % args.logging_steps == 0 or step == total_steps:
                record.update(window.means(accelerator), lr=scheduler.get_last_lr()[0], **updates)
                if args.train_shards:  # skipped by every process so far
                    corrupt = torch.tensor(loader.corrupt_samples, device=accelerator.device)
                    record["corrupt_samples"] = int(accelerator.reduce(corrupt, reduction="sum").item())
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
                         "run_name": run_name, "training_args": asdict(args)}
                process_state = {"task": task.state_dict(), "loss_window": window.state_dict(),
                                 **({"data_loader": loader.state_dict()} if args.train_shards else {})}
                save_checkpoint(accelerator, run_dir, step, state, process_state, args.save_total_limit,
                                lambda directory: task.save_files(directory, accelerator))
            if step >= total_steps:
                break
        else:
            if args.train_shards:  # the stream ran out: the next epoch
                epoch, batches_done = epoch + 1, 0
    progress.close()
    accelerator.wait_for_everyone()
    return model, history


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
