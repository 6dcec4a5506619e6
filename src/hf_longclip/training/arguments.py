"""`LoopArguments`, the optimisation, checkpointing and logging flags every example script shares, and the
parsers that check them as they are given (`--seeds`, `--lr_multipliers`, `--layer_decay`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


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
    contrastive_batch_size: int = field(default=0, metadata={
        "help": "gradient caching (GradCache): each process's loss sees a batch of N samples (N x processes "
                "globally), encoded in chunks of --per_device_train_batch_size, with the gradient of the whole "
                "batch; memory grows with the chunk, time by one more forward pass. 0: off (the batch is "
                "--per_device_train_batch_size). See docs/gradient_caching.md"})
    learning_rate: float = field(default=5e-4, metadata={"help": "peak AdamW learning rate, reached after the "
                                                                 "warmup, then cosine decay to 0"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decay of matrices (not of biases, norms, "
                                                               "scales)"})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW beta2 (beta1 is 0.9)"})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "AdamW epsilon (torch's default)"})
    lr_multipliers: str = field(default="", metadata={
        "help": "per-module learning-rate factors, comma-separated 'prefix=factor' matched against parameter "
                "names (dot-separated components; the longest matching prefix wins; unmatched parameters keep "
                "1), e.g. 'vision_model=0.01,text_model=0.1' (DITM's per-tower multipliers). '': none"})
    layer_decay: float = field(default=1.0, metadata={
        "help": "layer-wise learning-rate decay in (0, 1], per transformer tower (a module holding "
                "'encoder.layers.<i>'): with L blocks, its embeddings and pre-norm are layer 0, block i is "
                "layer i+1 and its other parameters (final norm) layer L+1; layer l gets decay^(L+1-l). "
                "Multiplies lr_multipliers; parameters outside towers keep 1. 1.0: off"})
    lock_image: bool = field(default=False, metadata={
        "help": "freeze the image tower (open_clip's --lock-image): no gradients and no optimizer state for it"})
    lock_image_unlocked_layers: int = field(default=0, metadata={
        "help": "with --lock_image: its last N transformer blocks, and its parameters after the blocks (final norm, "
                "projection), still train (open_clip's --lock-image-unlocked-groups)"})
    lock_text: bool = field(default=False, metadata={
        "help": "freeze the text tower (open_clip's --lock-text): no gradients and no optimizer state for it"})
    lock_text_unlocked_layers: int = field(default=0, metadata={
        "help": "with --lock_text: its last N transformer blocks, and its final norm and projection, still train "
                "(open_clip's --lock-text-unlocked-layers)"})
    warmup_steps: int = field(default=50, metadata={"help": "optimizer steps of linear warmup (at most half the "
                                                            "run)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (0: off); also DeepSpeed's"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
    ddp_find_unused_parameters: bool = field(default=False, metadata={
        "help": "let DDP handle parameters without a gradient in a step (e.g. a backbone frozen for a warm-up); "
                "costs a graph traversal per step"})
    torch_compile: bool = field(default=False, metadata={
        "help": "compile the whole training step, the model's encoders and the objective (torch.compile; under "
                "gradient caching its encoding and its loss), with no graph break; accelerate's own dynamo "
                "configuration does the same. See docs/training.md"})
    torch_compile_backend: str = field(default="inductor", metadata={
        "help": "torch.compile backend of --torch_compile ('inductor'; 'aot_eager' traces without generating code)"})
    torch_compile_mode: str | None = field(default=None, metadata={
        "help": "torch.compile mode of --torch_compile (None, 'reduce-overhead', 'max-autotune', ...)"})
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
    verify_shards: str = field(default="size", metadata={
        "choices": ["size", "xxh3_128"],
        "help": "before training, check each shard against its manifest.json: 'size' (always; a shard no manifest "
                "lists is read through as a tar) or 'xxh3_128' (also its XXH3-128 hash: reads every byte)"})
    dataloader_num_workers: int = field(default=0, metadata={
        "help": "data-loader worker processes that decode and preprocess (collate) training samples"})
    resume_from_checkpoint: str | None = field(default=None, metadata={
        "help": "'latest' (the newest valid checkpoint of each run; a run without checkpoints starts; one whose "
                "checkpoints are all invalid stops) or a checkpoint directory. Without it, a run that finds "
                "checkpoints stops (see --overwrite_output_dir)"})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "start each run afresh, deleting the checkpoints it finds (also invalid ones under 'latest')"})
    allow_changed_arguments: bool = field(default=False, metadata={
        "help": "resume although arguments that shape the run differ from those saved with the checkpoint (they "
                "are named, and the run is refused without this flag)"})

    def __post_init__(self):
        if self.gradient_accumulation_steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be >= 1, got {self.gradient_accumulation_steps}")
        if self.mixed_precision not in (None, "no", "fp16", "bf16"):
            raise ValueError(f"mixed_precision must be 'no', 'fp16' or 'bf16', got {self.mixed_precision!r}")
        for name in ("logging_steps", "per_device_train_batch_size", "per_device_eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.contrastive_batch_size != 0 and self.contrastive_batch_size < self.per_device_train_batch_size:
            raise ValueError(f"contrastive_batch_size must be 0 (off) or at least per_device_train_batch_size "
                             f"({self.per_device_train_batch_size}), its chunk; got {self.contrastive_batch_size}")
        for tower in ("image", "text"):
            unlocked = getattr(self, f"lock_{tower}_unlocked_layers")
            if unlocked < 0 or (unlocked and not getattr(self, f"lock_{tower}")):
                raise ValueError(f"lock_{tower}_unlocked_layers must be >= 0 and needs --lock_{tower}, got {unlocked}")
        self.seed_list()  # malformed seed lists fail here
        parse_lr_multipliers(self.lr_multipliers)  # malformed specs fail here, unmatched prefixes at train
        check_layer_decay(self.layer_decay)

    @property
    def process_batch_size(self) -> int:
        """The samples of one process's loss (one micro-batch): --contrastive_batch_size if set, else
        --per_device_train_batch_size."""
        return self.contrastive_batch_size or self.per_device_train_batch_size

    def seed_list(self) -> list[int]:
        """The seeds of `--seeds`, distinct, in order; [] without it."""
        try:
            seeds = [int(text) for text in self.seeds.split(",") if text.strip()]
        except ValueError:
            raise ValueError(f"seeds must be a comma list of integers, got {self.seeds!r}") from None
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds!r}")
        return seeds


# A model trained from scratch (a script's small base CLIP) has no pretrained tower to lock.
NO_TOWER_LOCKS = dict(lock_image=False, lock_image_unlocked_layers=0, lock_text=False, lock_text_unlocked_layers=0)


# Arguments that may change between a run and its resume: the output's location, how long the run goes on (a resume
# may extend it: the schedule then follows the new length), logging, evaluation and checkpointing cadence, memory-only
# and speed-only options (same arithmetic, up to rounding under compilation), which of a script's rows run, publishing
# and whether remote code may run. Every other
# argument shapes the run (data, model, objective, optimiser, batch, seed, processes...) and is saved with each
# checkpoint; a resume with a different value is refused (`run_signature`, `checkpoint.check_arguments`).
FREE_ON_RESUME = frozenset({
    "output_dir", "seeds", "num_train_epochs", "max_steps", "per_device_eval_batch_size", "gradient_checkpointing",
    "ddp_find_unused_parameters", "logging_steps", "report_to", "eval_steps", "checkpointing_steps",
    "save_total_limit", "resume_from_checkpoint", "overwrite_output_dir", "allow_changed_arguments",
    "variants", "ablation", "models", "push_to_hub", "hub_model_id", "hub_private", "trust_remote_code",
    "base_cache_dir", "torch_compile", "torch_compile_backend", "torch_compile_mode",
})


def run_signature(args: LoopArguments, num_processes: int, run_arguments: Mapping[str, Any] | None = None) -> dict:
    """What shapes a run, saved with each of its checkpoints: {"run": the script's arguments as given (`run_arguments`,
    e.g. `start_run`'s) and the number of processes, "loop": the loop's arguments as this run uses them}, each
    without `FREE_ON_RESUME`, as JSON values."""
    def shaping(arguments: Mapping[str, Any]) -> dict:
        return {name: value for name, value in arguments.items() if name not in FREE_ON_RESUME}

    signature = {"run": {**shaping(run_arguments or {}), "num_processes": num_processes},
                 "loop": shaping(asdict(args))}
    return json.loads(json.dumps(signature, default=str))


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
