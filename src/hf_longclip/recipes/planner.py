"""What fits where: the memory one training step takes per process, for a method at a released model size, and the
largest contrastive batch per process that fits a 24, 40, 80 or 141 GB GPU (`hf-longclip plan`).

The figures come from the real step, traced (`hf_longclip.training.memory`): the method's model and task are built
at full size on fake tensors (no memory, no arithmetic), and one optimizer step as the loop runs it (forward, the
task's objective, backward, gradient clipping, AdamW) is traced at three batch sizes, counting every live tensor's
bytes after each operator. What is an assumption (ZeRO's sharding, the memory a GPU keeps outside tensors, the
attention kernel) is printed with every plan (`MemoryPlan.assumptions`).

    plan = plan_memory(PlanSettings(size="ViT-L/14", method="himo", gradient_checkpointing=True, zero_stage=2,
                                    processes=8))
    print(format_plan(plan))
    plan.largest_batch[80]

docs/training.md's "What fits where" tables are this planner's figures for every method at the common setups
(scripts/fits_table.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from hf_longclip.recipes.registry import SIZES, BuildOptions, PlaceholderInputs, method
from hf_longclip.training.memory import (
    Sharding,
    StepMemory,
    StepOptions,
    StepWorkload,
    trace_step_memory,
)

GiB = 2**30
GPU_MEMORY_GB = (24, 40, 80, 141)
# a card sold as N GB shows about N GiB to PyTorch (A100-80GB 79.2, H100 79.6, H200 139.8, A100-40GB 39.4, RTX 4090
# 23.6); of that, RESERVED_GIB is outside PyTorch's tensors (CUDA context and kernels, cuBLAS and NCCL workspaces)
# and FRAGMENTATION of the rest is left to the caching allocator's rounding and fragmentation
RESERVED_GIB = 1.0
FRAGMENTATION = 0.10


@dataclass(frozen=True)
class PlanSettings:
    """What to plan: `size` (a `SIZES` name), `method` (a method of `hf_longclip.recipes.registry`), `precision`
    ("bf16": mixed, or "fp32"), `gradient_checkpointing`, `zero_stage` (0, 2 or 3; 0 with several processes is
    DDP) over `processes`, gradient caching's `chunk` (0: off), `lora_r` (LoRA's rank on the attention
    projections; 0: full fine-tuning), `lock` ("image" or "text": that tower frozen, open_clip's --lock-image /
    --lock-text; "none"), OneLIP's `hard_negatives` (M queued per sample; 0: none) and `bank_captions` (the
    captions whose base embeddings sit on the GPU for the queues' gather; ShareGPT4V's 1.2M), `target` ("gpu":
    AdamW's multi-tensor kernels, memory set aside per card; "cpu": PyTorch's CPU defaults, nothing set aside)
    and the traced `batch_sizes` (default: 8, 16, 24; with gradient caching 2, 3 and 4 chunks)."""

    size: str = "ViT-B/16"
    method: str = "himo"
    precision: str = "bf16"
    gradient_checkpointing: bool = False
    zero_stage: int = 0
    processes: int = 1
    chunk: int = 0
    lora_r: int = 0
    lock: str = "none"
    hard_negatives: int = 1024
    bank_captions: int = 1_200_000
    target: str = "gpu"
    batch_sizes: tuple[int, ...] = ()

    def __post_init__(self):
        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; choose among {', '.join(SIZES)}")
        object.__setattr__(self, "method", method(self.method).name)
        if self.precision not in ("bf16", "fp32"):
            raise ValueError(f"precision must be bf16 or fp32, got {self.precision!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.processes < 1:
            raise ValueError(f"processes must be >= 1, got {self.processes}")
        if min(self.chunk, self.lora_r, self.hard_negatives) < 0 or self.bank_captions < 1:
            raise ValueError(f"chunk, lora_r and hard_negatives must be >= 0 and bank_captions >= 1, got "
                             f"{self.chunk}, {self.lora_r}, {self.hard_negatives} and {self.bank_captions}")
        if self.chunk and self.zero_stage == 3:
            raise ValueError("gradient caching runs on one process, DDP or ZeRO-1/2, not ZeRO-3 (the loop refuses it)")
        if self.lock not in ("none", "image", "text"):
            raise ValueError(f"lock must be none, image or text, got {self.lock!r}")
        if self.lock != "none" and self.lora_r:
            raise ValueError("LoRA freezes every base weight already: lock no tower with it")
        if self.target not in ("gpu", "cpu"):
            raise ValueError(f"target must be gpu or cpu, got {self.target!r}")
        if why := method(self.method).unavailable(SIZES[self.size]):
            raise ValueError(f"{self.method} is not defined at {self.size}: {why}")

    def build_options(self) -> BuildOptions:
        return BuildOptions(hard_negatives=self.hard_negatives, bank_captions=self.bank_captions, target=self.target)

    @property
    def deepspeed(self) -> bool:
        return self.zero_stage > 0

    @property
    def traced_batch_sizes(self) -> tuple[int, ...]:
        if self.batch_sizes:
            return tuple(self.batch_sizes)
        return (2 * self.chunk, 3 * self.chunk, 4 * self.chunk) if self.chunk else (8, 16, 24)

    def sharding(self) -> Sharding:
        # DeepSpeed's bf16 weights: its optimizer keeps fp32 master weights and moments, 12 bytes a parameter where
        # the traced AdamW over bf16 weights keeps 4
        factor = 3.0 if self.deepspeed and self.precision == "bf16" else 1.0
        return Sharding(self.zero_stage, self.processes, factor)

    def step_options(self) -> StepOptions:
        return StepOptions(precision=self.precision, gradient_checkpointing=self.gradient_checkpointing,
                           chunk=self.chunk, foreach=self.target == "gpu", processes=self.processes,
                           deepspeed=self.deepspeed)

    def describe(self) -> str:
        engine = (f"ZeRO-{self.zero_stage} over {self.processes} processes" if self.zero_stage
                  else f"DDP over {self.processes} processes" if self.processes > 1 else "one process")
        parts = [f"{self.method} at {self.size}", "bf16 mixed" if self.precision == "bf16" else "fp32", engine,
                 "gradient checkpointing" if self.gradient_checkpointing else "no gradient checkpointing"]
        if self.chunk:
            parts.append(f"gradient cache in chunks of {self.chunk}")
        if self.lora_r:
            parts.append(f"LoRA r={self.lora_r}")
        if self.lock != "none":
            parts.append(f"{self.lock} tower locked")
        if "hard_negatives" in method(self.method).options_used:
            parts.append(f"{self.hard_negatives} hard negatives per sample" if self.hard_negatives
                         else "no hard negatives")
        return ", ".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# The workload: the method's model and task (its spec in the registry), at a size


def step_workload(settings: PlanSettings) -> StepWorkload:
    """The step `settings` plans: the method's model and task at its size (`Method.build`), LoRA or a locked tower
    as the loop applies them, and batches as the method's collator makes them, of fixed values (`PlaceholderInputs`;
    DeepSpeed's bf16 runs the model in bf16 without autocast: pixels come in bf16, as CAST's patch embedding does
    not cast them to its weights' dtype)."""
    size, spec, options = SIZES[settings.size], method(settings.method), settings.build_options()
    model, task = spec.build(size, options)
    model = _adapted(model, settings)
    pixels = torch.bfloat16 if settings.deepspeed and settings.precision == "bf16" else torch.float32
    inputs = PlaceholderInputs(size, pixel_dtype=pixels)
    # what the objective holds outside the model, after the first step (which may have moved it)
    return StepWorkload(model, task, lambda rows: spec.example_batch(size, rows, inputs, options),
                        lambda: list(spec.held_outside(task).values()))


def _adapted(model: torch.nn.Module, settings: PlanSettings) -> torch.nn.Module:
    """The model with LoRA adapters (`apply_lora`, attention projections of both towers) or a tower locked
    (`lock_tower`), as the loop trains it."""
    if settings.lora_r:
        from hf_longclip.training.lora import LoraArguments, apply_lora

        return apply_lora(model, LoraArguments(lora_r=settings.lora_r))
    if settings.lock != "none":
        from hf_longclip.training.optimizer import lock_tower

        lock_tower(model, settings.lock)
    return model


# ---------------------------------------------------------------------------------------------------------------
# The plan


def usable_bytes(card_gb: float, target: str = "gpu") -> float:
    """Bytes a step may peak at on a card sold as `card_gb` GB (see RESERVED_GIB, FRAGMENTATION); on the CPU, all."""
    if target == "cpu":
        return card_gb * GiB
    return max(0.0, (card_gb - RESERVED_GIB) * GiB * (1 - FRAGMENTATION))


def assumptions(settings: PlanSettings) -> list[str]:
    lines = [
        "traced: one steady-state optimizer step of the real model and task on fake tensors (forward, objective, "
        "backward, gradient clipping, AdamW), at the batch sizes shown; every operator's live bytes fitted as a "
        "quadratic in the batch",
        "attention: SDPA's fused kernel, as the fake CPU tensors select it (flash / memory-efficient on a GPU): no "
        "L x L attention matrix kept for backward; eager attention would keep one per head and layer",
    ]
    if settings.target == "gpu":
        lines.append(f"a card of N GB: N GiB, less {RESERVED_GIB:g} GiB outside PyTorch's tensors (CUDA context, "
                     f"cuBLAS / NCCL workspaces), less {FRAGMENTATION:.0%} of the rest for the caching allocator's "
                     "rounding and fragmentation")
    if settings.processes > 1:
        lines.append(f"the objective gathers over {settings.processes} processes (a fake process group in the trace: "
                     "the gathered rows and the B x N*B similarities are counted)")
    if settings.zero_stage:
        sharded = ["the optimizer state", *(["gradients"] if settings.zero_stage >= 2 else []),
                   *(["weights"] if settings.zero_stage == 3 else [])]
        lines.append(f"ZeRO-{settings.zero_stage} is an assumption, not traced: "
                     + (", ".join(sharded[:-1]) + " and " + sharded[-1] if len(sharded) > 1 else sharded[0])
                     + f" divided by the {settings.processes} processes; DeepSpeed's communication buckets"
                     + (" and ZeRO-3's gathered layers" if settings.zero_stage == 3 else "") + " not counted")
        if settings.precision == "bf16":
            lines.append("DeepSpeed bf16: bf16 weights and gradients, the model run without autocast on bf16 pixels, "
                         "fp32 master weights and moments in the optimizer (12 bytes a parameter, sharded)")
    elif settings.processes > 1:
        lines.append("DDP: its gradient buckets hold a second copy of the gradients (gradient_as_bucket_view=False, "
                     "accelerate's default)")
    if settings.precision == "bf16" and not settings.zero_stage:
        lines.append("bf16 mixed as accelerate runs it: fp32 weights, the model's forward under bf16 autocast, its "
                     "outputs and the objective in fp32")
    lines += method(settings.method).plan_notes(settings.build_options())
    if settings.chunk:
        lines.append("gradient cache: the contrastive batch is encoded in chunks twice; the batch below is the "
                     "contrastive batch per process (a multiple of the chunk)")
    return lines


@dataclass
class MemoryPlan:
    """A plan's figures (bytes per process) and where they come from."""

    settings: PlanSettings
    parameters: int
    trained_parameters: int
    weights: float
    buffers: float
    gradients: float
    optimizer: float
    extra: float
    per_sample: float
    traced: list[dict]  # {"batch_size", "peak"} of each trace (no fit)
    largest_batch: dict[int, int]  # card GB -> largest batch per process
    peak_at: dict[int, float] = field(default_factory=dict)  # batch -> peak bytes (the largest batches' and 128's)
    held_outside: list[str] = field(default_factory=list)  # what the objective's extra holds (a frozen teacher, ...)
    assumptions: list[str] = field(default_factory=list)
    seconds: float = 0.0
    aligned: bool = True

    def to_dict(self) -> dict:
        data = asdict(self)
        data["settings"] = asdict(self.settings)
        data["largest_batch"] = {str(key): value for key, value in self.largest_batch.items()}
        data["peak_at"] = {str(key): value for key, value in self.peak_at.items()}
        return data


def plan_memory(settings: PlanSettings, budgets_gb=GPU_MEMORY_GB, memory: StepMemory | None = None) -> MemoryPlan:
    """Trace the step `settings` describes (or reuse `memory`, a trace of the same step) and derive the plan."""
    start = time.perf_counter()
    held = []  # what the objective holds outside the model, by name

    def build() -> StepWorkload:
        workload = step_workload(settings)
        held.extend(method(settings.method).held_outside(workload.task))
        return workload

    if memory is None:
        memory = trace_step_memory(build, settings.step_options(), settings.traced_batch_sizes)
    sharding = settings.sharding()
    rest = memory.at_rest(sharding)
    multiple = settings.chunk or 1
    largest = {gb: memory.largest_batch(usable_bytes(gb, settings.target), sharding, multiple) for gb in budgets_gb}
    peak_at = {batch: memory.peak(batch, sharding) for batch in sorted({*largest.values(), 128} - {0})}
    return MemoryPlan(
        settings=settings, parameters=memory.parameters, trained_parameters=memory.trained_parameters,
        weights=rest["weights"], buffers=rest["buffers"], gradients=memory.gradients(sharding),
        optimizer=rest["optimizer"], extra=rest["extra"], per_sample=memory.per_sample(sharding),
        traced=[{"batch_size": batch, "peak": peak}
                for batch, peak in zip(memory.batch_sizes, memory.traced_peaks(sharding), strict=True)],
        largest_batch=largest, peak_at=peak_at, assumptions=assumptions(settings), held_outside=held,
        seconds=time.perf_counter() - start, aligned=memory.aligned)


def _gib(value: float) -> str:
    return f"{value / GiB:8.2f} GiB" if value >= 2**28 else f"{value / 2**20:8.2f} MiB"


def format_plan(plan: MemoryPlan) -> str:
    """The plan as `hf-longclip plan` prints it."""
    s = plan.settings
    trained = ("every parameter trained" if plan.trained_parameters == plan.parameters
               else f"{plan.trained_parameters / 1e6:.2f} M trained")
    lines = [f"{s.describe()}", f"{plan.parameters / 1e6:.1f} M parameters, {trained}", "",
             "memory per process, by part:",
             f"  weights                   {_gib(plan.weights + plan.buffers)}",
             f"  gradients                 {_gib(plan.gradients)}",
             f"  optimizer state (AdamW)   {_gib(plan.optimizer)}",
             f"  objective's extra         {_gib(plan.extra)}"
             + (f"   ({', '.join(plan.held_outside)})" if plan.held_outside else ""),
             f"  activations per sample    {_gib(plan.per_sample)}   (growth of the step's peak per sample, batches "
             f"{plan.traced[0]['batch_size']}-{plan.traced[-1]['batch_size']})",
             "  step peak, traced         " + ", ".join(f"{_gib(row['peak']).strip()} at {row['batch_size']}"
                                                      for row in plan.traced)]
    if 128 in plan.peak_at:
        lines.append(f"  step peak at batch 128    {_gib(plan.peak_at[128])}")
    what = "contrastive batch" if s.chunk else "batch"
    lines += ["", f"largest {what} per process that fits ({'usable' if s.target == 'gpu' else 'memory'}):"]
    for gb, batch in plan.largest_batch.items():
        usable = usable_bytes(gb, s.target) / GiB
        global_batch = f" ({batch * s.processes} over {s.processes} processes)" if s.processes > 1 and batch else ""
        lines.append(f"  {gb:4d} GB ({usable:6.1f} GiB): {batch if batch else 'none'}{global_batch}")
    lines += ["", "assumptions:", *(f"  - {line}" for line in plan.assumptions),
              f"  (traced in {plan.seconds:.1f} s{'' if plan.aligned else '; peaks fitted per trace'})"]
    return "\n".join(lines)


__all__ = ["GPU_MEMORY_GB", "MemoryPlan", "PlanSettings", "assumptions", "format_plan", "plan_memory", "step_workload",
           "usable_bytes"]
