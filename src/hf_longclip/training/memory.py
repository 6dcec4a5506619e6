"""What one training step holds in memory, traced rather than estimated.

The loop's own step (`hf_longclip.training.loop.optimizer_step`: the task's forward and objective, or gradient
caching's two passes; backward; gradient clipping; AdamW), then the task's after-step hook, runs on fake tensors
(`torch._subclasses.fake_tensor.FakeTensorMode`: shapes, dtypes and devices, no data, no arithmetic) under PyTorch's
memory tracker (`torch.distributed._tools.mem_tracker.MemTracker`: the bytes of every live tensor storage, by what it
holds: `CATEGORIES`), whose snapshot is kept after every operator (`StepTracker`). The result (`StepMemory`) is that
timeline at a few batch sizes; between them every operator's live bytes are fitted as a polynomial of the batch
(degree 2: the B x N*B similarity matrices of the gathered batch), so the peak at any batch is the largest of them,
whichever operator it falls on.

    memory = trace_step_memory(build, StepOptions(precision="bf16", gradient_checkpointing=True), (8, 16, 24))
    memory.peak(128, Sharding(zero_stage=2, processes=8))        # bytes per process
    memory.largest_batch(80 * 2**30, Sharding(2, 8))

Where the trace is exact and where it is not:

- The batch's contrastive gather across processes runs through a fake process group of `processes` ranks (the
  "fake" backend, which `torch.distributed._tools` registers): the gathered rows and the B x N*B logits are in the
  trace.
- Under `precision="bf16"` the model's forward runs as accelerate runs it (`Accelerator.prepare`: the forward under
  bf16 autocast, its outputs cast back to fp32; what the task runs outside the model's forward, in fp32). Under
  DeepSpeed (`Sharding.zero_stage > 0`) with bf16 the weights are bf16 and there is no autocast, as DeepSpeed's
  bf16 mode runs them; its optimizer keeps fp32 master weights and moments: the traced AdamW state (bf16 moments) is
  counted three times over (4 -> 12 bytes a parameter).
- ZeRO's sharding is not traced: it is an assumption (`Sharding.scales`): stage 1 and up divide the optimizer state
  (and the optimizer step's temporaries) by the processes, stage 2 also the gradients, stage 3 also the weights.
  DeepSpeed's communication buckets and ZeRO-3's gathered layers are left out. DDP (stage 0, several processes)
  adds its gradient buckets, a second copy of the gradients (accelerate's default `gradient_as_bucket_view=False`).
- The attention kernel is the one the fake CPU tensors select (SDPA's fused kernel: no L x L matrix is kept for
  backward), as flash / memory-efficient attention on a GPU; the CUDA context, cuBLAS / NCCL workspaces and the
  caching allocator's fragmentation are not tensors: `hf_longclip.recipes.planner` sets memory aside for them.
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch._guards import active_fake_mode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed._tools.mod_tracker import ModTracker
from torch.utils.hooks import RemovableHandle
from torch.utils.weak import WeakIdKeyDictionary

from .task import Task

# MemTracker's kinds of memory -> the planner's names (`Sharding.scales` divides some of them)
_KINDS = {"Parameter": "weights", "Buffer": "buffers", "Gradient": "gradients", "Optstate": "optimizer",
          "Activation": "activations", "Temp": "temporaries", "Other": "extra"}
CATEGORIES = tuple(_KINDS.values())
_INDEX = {name: index for index, name in enumerate(CATEGORIES)}


_HOST_VALUES = WeakIdKeyDictionary()  # fake storage -> the values a host read of it gives


def with_host_values(tensor: torch.Tensor, values: Sequence) -> torch.Tensor:
    """`tensor` (fake, one-dimensional, contiguous), whose elements read on the host (`.tolist()`, `.item()`) give
    `values`: for a batch's index tensors that a task reads to cut its batch (DITM's `text_image_index`)."""
    _HOST_VALUES[tensor.untyped_storage()] = list(values)
    return tensor


def _host_value(tensor: torch.Tensor):
    """What the host reads of a fake scalar tensor: its recorded value (`with_host_values`), else what valid data
    gives an input check (True, 1)."""
    values = _HOST_VALUES.get(tensor.untyped_storage())
    if values is not None:
        return values[tensor.storage_offset()]
    return {torch.bool: True}.get(tensor.dtype, 1.0 if tensor.is_floating_point() else 1)


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


class StepTracker(MemTracker):
    """PyTorch's `MemTracker` (live bytes of every tensor storage, by kind: parameters, buffers, gradients, optimizer
    state, activations, backward's temporaries, others), without its per-module statistics (`_NoModuleHooks`),
    which also keeps its bytes by category (`live()`) after each operator in `events` while `recording` and answers
    the host's reads of fake tensors (`with_host_values`)."""

    def __init__(self):
        super().__init__()
        self._mod_tracker = _NoModuleHooks()
        self.recording = False
        self.events: list[np.ndarray] = []

    def live(self, kind: str = "current") -> np.ndarray:
        """Bytes of each of `CATEGORIES` now ("current") or at the peak since the tracker was entered ("peak")."""
        row = np.zeros(len(CATEGORIES))
        for snapshot in self.get_tracker_snapshot(kind).values():  # one per device
            for key, nbytes in snapshot.items():
                name = _KINDS.get(getattr(key, "value", key))  # not the "Total"
                if name is not None:
                    row[_INDEX[name]] += nbytes
        return row

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and _is_fake(args[0]):
            # a value read on the host has no data here (`_host_value`)
            return _host_value(args[0])
        out = super().__torch_dispatch__(func, types, args, kwargs)
        fake = active_fake_mode()
        if fake is not None:
            # the fake mode's memo (a cache) holds a weak reference to every fake tensor made, and `module.to()` of
            # a fake module swaps its parameters (peft's adapters placed like their layer, OneLIP's teacher put in
            # the model's dtype), which torch refuses while one is held
            fake.fake_tensor_converter.tensor_memo.clear()
        if self.recording:
            self.events.append(self.live())
        return out

    def track_model(self, model: torch.nn.Module) -> None:
        """Count `model`'s parameters and buffers as such and, from now on, its trained parameters' gradients as
        gradients (what MemTracker does for a module it sees run; autograd refuses a frozen parameter's hook)."""
        for param in model.parameters():
            if not param.requires_grad:
                self._param_to_grad_hook_handles.setdefault(param, (_NO_HOOK, _NO_HOOK))
        self._track_module_params_and_buffers(model)


class _NoModuleHooks(ModTracker):
    """MemTracker's module tracker without its hooks: whether backward runs, no per-module statistics. Those refuse a
    second call of a top-level module (the loop's step makes several: gradient caching's chunks, Long-CLIP's short
    captions) and their gradient hooks on the modules' inputs refuse `torch.autograd.grad` (gradient caching's
    objective over cached outputs)."""

    def __enter__(self):
        return self

    def __exit__(self, *args):
        pass


_NO_HOOK = RemovableHandle(OrderedDict())  # removes nothing


@dataclass
class StepWorkload:
    """What a step trains: `model` (after LoRA or tower locking: its parameters with `requires_grad` are trained),
    the `task` that computes its loss, `make_batch(b)` a batch of b samples (what the task's collator gives) and
    `extra`, tensors the objective holds outside the model (a frozen teacher's weights, a bank of negatives), or a
    function that gives them after the first step (which may have moved them)."""

    model: torch.nn.Module
    task: Task
    make_batch: Callable[[int], dict]
    extra: list | Callable[[], list] = field(default_factory=list)


@dataclass(frozen=True)
class StepOptions:
    """How the step runs (the loop's flags): `precision` "fp32" or "bf16" (mixed: accelerate's autocast, or
    DeepSpeed's bf16 weights when `deepspeed`), `gradient_checkpointing`, `chunk` (gradient caching's chunk,
    `--per_device_train_batch_size` under `--contrastive_batch_size`; 0: off), `foreach` (AdamW's and clipping's
    multi-tensor kernels, PyTorch's default on CUDA; the CPU's is one tensor at a time), `max_grad_norm`,
    `weight_decay`, `processes` (the world the objective gathers over) and `deepspeed` (weights in bf16, no
    autocast)."""

    precision: str = "bf16"
    gradient_checkpointing: bool = False
    chunk: int = 0
    foreach: bool = True
    max_grad_norm: float = 1.0
    weight_decay: float = 0.1
    processes: int = 1
    deepspeed: bool = False

    def __post_init__(self):
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if self.processes < 1 or self.chunk < 0:
            raise ValueError(f"processes must be >= 1 and chunk >= 0, got {self.processes} and {self.chunk}")


@dataclass(frozen=True)
class Sharding:
    """ZeRO `zero_stage` (0: none; with several processes, DDP) over `processes` processes, and whether the traced
    AdamW state stands for DeepSpeed's fp32 master weights and moments (`optimizer_factor`: 3 for bf16 weights)."""

    zero_stage: int = 0
    processes: int = 1
    optimizer_factor: float = 1.0

    def __post_init__(self):
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.processes < 1:
            raise ValueError(f"processes must be >= 1, got {self.processes}")

    def scales(self) -> dict[str, float]:
        """Per-process bytes of each category relative to the traced (unsharded) step: the assumption above."""
        n, stage = self.processes, self.zero_stage
        scales = dict.fromkeys(CATEGORIES, 1.0)
        scales["optimizer"] = self.optimizer_factor / (n if stage >= 1 else 1)
        if stage >= 2:
            scales["gradients"] = 1 / n
        elif stage == 0 and n > 1:
            scales["gradients"] = 2.0  # DDP's buckets hold a second copy
        if stage == 3:
            scales["weights"] = 1 / n
        return scales


@dataclass
class Timeline:
    """Live bytes by category after each operator of one traced step at `batch_size` (`events`: operators x
    categories), the live bytes before the step (its batch made), where the objective over the whole batch starts
    and where the part after it ends (the next chunk's encoding, or the optimizer's step), the live bytes once
    backward is done and the seconds the trace took."""

    batch_size: int
    events: np.ndarray
    before: np.ndarray
    segments: tuple[int, int]
    after_backward: np.ndarray
    seconds: float


class OneProcessAccelerator:
    """What `loop.optimizer_step`, `gradient_cache.cached_backward` and the tasks' after-step hooks ask of an
    Accelerator, for one process without a wrapper (the planner's traced step, benchmarks/gpu_suite.py)."""

    def __init__(self, device: torch.device):
        from accelerate.utils import DistributedType

        self.distributed_type, self.device, self.sync_gradients = DistributedType.NO, device, True

    def no_sync(self, model):
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_grad_norm_(self, parameters, max_norm: float, norm_type: float = 2):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def unwrap_model(self, model):
        return model


@contextlib.contextmanager
def fake_process_group(processes: int):
    """A fake process group of `processes` ranks (this one rank 0) for the traced objective's gathers; nothing when
    one process or a group already exists."""
    import torch.distributed as dist

    if processes == 1 or (dist.is_available() and dist.is_initialized()):
        yield
        return
    dist.init_process_group("fake", store=dist.HashStore(), rank=0, world_size=processes)
    try:
        with warnings.catch_warnings():  # torch.distributed.nn.functional.all_gather's deprecation notice
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        dist.destroy_process_group()


def _mixed_precision(model: torch.nn.Module, device_type: str) -> None:
    """`model`'s forward under bf16 autocast, its outputs cast to fp32: what `Accelerator.prepare` does under mixed
    precision (by wrapping `forward`), here by the module's forward hooks."""
    from accelerate.utils import convert_to_fp32

    autocast = torch.autocast(device_type, dtype=torch.bfloat16)

    def leave(module, args, output):
        autocast.__exit__(None, None, None)
        return convert_to_fp32(output)

    def enter(module, args):
        autocast.__enter__()

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)


def _optimizer(model: torch.nn.Module, options: StepOptions) -> torch.optim.Optimizer:
    from .optimizer import parameter_groups

    groups = parameter_groups(model, options.weight_decay, 1e-5)
    return torch.optim.AdamW(groups, lr=1e-5, betas=(0.9, 0.98), foreach=options.foreach)


def _trained(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [param for param in model.parameters() if param.requires_grad]


class TrainingStep:
    """One optimizer step of `workload` as the loop runs it under `options` (`loop.optimizer_step`, then the task's
    after-step hook) and what the loop sets up for it: gradient checkpointing, the model's forward under bf16
    autocast as accelerate runs it (unless `options.deepspeed`: bf16 weights then), AdamW over the loop's parameter
    groups. On real tensors (`measured_step_peak`, benchmarks/gpu_suite.py) or traced: with a `tracker`, it notes
    where in the tracker's events the objective over the whole batch, each encoding and the optimizer's step start
    (the task's `encode`, `loss` and `device_step`, handed to the step as the loop hands its compiled ones)."""

    def __init__(self, workload: StepWorkload, options: StepOptions, tracker: StepTracker | None = None):
        self.options, self.tracker = options, tracker
        model = self.model = workload.model
        self.task = workload.task
        self.accelerator = OneProcessAccelerator(next(model.parameters()).device)
        if options.gradient_checkpointing:
            with warnings.catch_warnings():  # transformers 5 renames it; the loop still calls this name
                warnings.simplefilter("ignore", FutureWarning)
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if options.precision == "bf16" and not options.deepspeed:
            _mixed_precision(model, self.accelerator.device.type)
        model.train()
        self.optimizer = _optimizer(model, options)
        self.steps = None
        self.loss_start, self.optimizer_start, self.encode_starts, self.after_backward = 0, 0, [], None
        if tracker is not None:
            tracker.track_model(model)
            self.steps = self._marked_steps()
            self.optimizer.register_step_pre_hook(self._optimizer_starts)

    def _marked_steps(self) -> dict[str, Callable]:
        """The task's `encode`, `loss` and `device_step` (`Task.device_step`: encode, then loss), noting where in the
        tracker's events each encoding and the objective start."""
        task = self.task

        def encode(model, batch):
            self.encode_starts.append(len(self.tracker.events))
            return task.encode(model, batch)

        def loss(model, encoded, batch):
            self.loss_start = len(self.tracker.events)
            return task.loss(model, encoded, batch)

        def device_step(model, batch):
            encoded = encode(model, batch)
            return loss(model, encoded, batch), encoded

        return {"encode": encode, "loss": loss, "device_step": device_step}

    def _optimizer_starts(self, optimizer, args, kwargs) -> None:
        self.optimizer_start, self.after_backward = len(self.tracker.events), self.tracker.live()

    def segments(self) -> tuple[int, int]:
        """Where the objective over the whole batch starts, and where what follows it before the next chunk's
        encoding ends (gradient caching: its gradient; otherwise: backward and clipping)."""
        later = [start for start in self.encode_starts if start > self.loss_start]
        return self.loss_start, min(later) if later else self.optimizer_start

    def __call__(self, batch: dict) -> None:
        from .loop import optimizer_step

        self.encode_starts = []
        optimizer_step(self.task, self.model, batch, self.optimizer, self.accelerator, self.options.max_grad_norm,
                       self.options.chunk, self.steps)
        self.task.after_optimizer_step(self.model, self.accelerator)


def measured_step_peak(step: TrainingStep, batch: dict) -> int:
    """Bytes above what lives before it (the weights, buffers, batch and optimizer state) at which one real step of
    `step` on `batch` peaks, as MemTracker counts live tensor storages: the measurement a planner's prediction is
    checked against on the CPU, where no allocator counts torch's memory."""
    tracker = StepTracker()
    tracker.track_model(step.model)
    tracker.track_external(step.optimizer, batch)
    with tracker:
        before = tracker.live().sum()
        step(batch)
    return int(tracker.live("peak").sum() - before)


def trace_step_memory(build: Callable[[], StepWorkload], options: StepOptions,
                      batch_sizes: Sequence[int]) -> "StepMemory":
    """Trace one steady-state optimizer step of the workload `build()` makes (after a first step at the smallest
    batch: AdamW's state, what the task places once) at each of `batch_sizes` (per process; with `options.chunk`,
    the contrastive batch), on fake tensors; see the module docstring."""
    from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode

    if len(batch_sizes) < 2 or sorted(set(batch_sizes)) != list(batch_sizes):
        raise ValueError(f"trace at two or more increasing batch sizes, got {batch_sizes}")
    tracker = StepTracker()
    timelines = []
    default_dtype = torch.get_default_dtype()
    try:
        with fake_process_group(options.processes), FakeTensorMode() as fake, tracker:
            # DeepSpeed's bf16 weights: built in bf16 (cheaper than converting fake modules)
            torch.set_default_dtype(torch.bfloat16 if options.deepspeed and options.precision == "bf16"
                                    else default_dtype)
            with FakeCopyMode(fake):  # a deep copy (OneLIP's teacher) stays in this fake mode
                workload = build()
            torch.set_default_dtype(default_dtype)
            model = workload.model
            step = TrainingStep(workload, options, tracker)
            step(workload.make_batch(batch_sizes[0]))
            gc.collect()
            # at rest: the model's weights and buffers, AdamW's state and, the objective's, what else the first step
            # left (a frozen teacher, queues, kept position rows)
            tracker.track_external(workload.extra() if callable(workload.extra) else workload.extra)
            rest = tracker.live()
            for batch_size in batch_sizes:
                start = time.perf_counter()
                batch = workload.make_batch(batch_size)
                before = tracker.live()
                tracker.events, tracker.recording = [], True
                step(batch)
                tracker.recording = False
                del batch
                timelines.append(Timeline(batch_size, np.asarray(tracker.events), before, step.segments(),
                                          step.after_backward, time.perf_counter() - start))
            parameters = sum(param.numel() for param in model.parameters())
            trained = sum(param.numel() for param in _trained(model))
    finally:
        torch.set_default_dtype(default_dtype)
    return StepMemory(timelines, rest, parameters, trained, chunked=bool(options.chunk))

class StepMemory:
    """Traced timelines of one step at several batch sizes (`trace_step_memory`) and what follows from them: the
    peak per process at any batch under a `Sharding`, what it is made of, and the largest batch under a budget.

    Each timeline is cut in three: before the objective over the whole batch, from it to the next chunk's encoding
    (gradient caching) or the optimizer, and the rest. A part made of the same operators at every traced batch is
    fitted operator by operator (bytes as a polynomial of degree 2 in the batch); a part that is not (gradient
    caching's chunk passes, whose number grows with the batch; a decomposition whose backward branches on the
    batch's size) is fitted by its largest operator at each traced batch, by category (degree 1 for chunk passes:
    their peak grows with the cached per-sample outputs; else 2)."""

    def __init__(self, timelines: list[Timeline], rest: np.ndarray, parameters: int, trained_parameters: int,
                 chunked: bool = False):
        self.timelines, self.rest = timelines, rest
        self.parameters, self.trained_parameters = parameters, trained_parameters
        self.batch_sizes = [timeline.batch_size for timeline in timelines]
        self.degree = min(2, len(timelines) - 1)
        sizes = np.asarray(self.batch_sizes, dtype=np.float64)
        self._pinv = np.linalg.pinv(np.vander(sizes, self.degree + 1, increasing=True))
        loose_degree = min(1 if chunked else 2, self.degree)
        self._loose_pinv = np.linalg.pinv(np.vander(sizes, loose_degree + 1, increasing=True))
        self.loose_degree = loose_degree
        self.parts = []  # ("aligned", coefficients (degree + 1, events, categories)) or ("loose", [events per trace])
        for index in range(3):
            pieces = [self._segment(timeline, index) for timeline in timelines]
            if len({len(piece) for piece in pieces}) == 1:
                if len(pieces[0]):
                    self.parts.append(("aligned", np.einsum("dp,pec->dec", self._pinv, np.stack(pieces))))
            else:
                self.parts.append(("loose", pieces))
        self.aligned = all(kind == "aligned" for kind, _ in self.parts)

    @staticmethod
    def _segment(timeline: Timeline, index: int) -> np.ndarray:
        begin, end = timeline.segments
        bounds = (0, begin, end, len(timeline.events))
        return timeline.events[bounds[index]:bounds[index + 1]]

    def _scales(self, sharding: Sharding) -> np.ndarray:
        scales = sharding.scales()
        return np.asarray([scales[name] for name in CATEGORIES])

    def _peak_rows(self, batch_size: float, scales: np.ndarray) -> list[np.ndarray]:
        """Each part's row of category bytes (scaled) at its largest operator at `batch_size`."""
        rows = []
        for kind, data in self.parts:
            if kind == "aligned":
                powers = np.asarray([batch_size ** d for d in range(self.degree + 1)])
                events = np.einsum("d,dec->ec", powers, data) * scales
                rows.append(events[int(np.argmax(events.sum(axis=1)))])
            else:
                peaks = []
                for events in data:
                    scaled = events * scales
                    peaks.append(scaled[int(np.argmax(scaled.sum(axis=1)))])
                powers = np.asarray([batch_size ** d for d in range(self.loose_degree + 1)])
                rows.append(powers @ (self._loose_pinv @ np.stack(peaks)))
        return rows

    def parts_at_peak(self, batch_size: float, sharding: Sharding = Sharding()) -> dict[str, float]:
        """Bytes per process of each category at the step's peak at `batch_size`, after `sharding`, and "total"."""
        rows = self._peak_rows(batch_size, self._scales(sharding))
        row = max(rows, key=lambda r: r.sum())
        parts = {name: float(value) for name, value in zip(CATEGORIES, row, strict=True)}
        parts["total"] = float(row.sum())
        return parts

    def peak(self, batch_size: float, sharding: Sharding = Sharding()) -> float:
        """Peak bytes per process of the step at `batch_size` (per process) under `sharding`."""
        return self.parts_at_peak(batch_size, sharding)["total"]

    def traced_peaks(self, sharding: Sharding = Sharding()) -> list[float]:
        """The peak of each traced timeline itself (no fit), under `sharding`."""
        scales = self._scales(sharding)
        return [float((timeline.events * scales).sum(axis=1).max()) for timeline in self.timelines]

    def at_rest(self, sharding: Sharding = Sharding()) -> dict[str, float]:
        """Bytes per process before a step's batch is made: the model's weights and buffers, the optimizer state,
        and the objective's "extra" (all else that lives on: a frozen teacher, queues)."""
        rest = self.rest * self._scales(sharding)
        parts = {name: float(rest[_INDEX[name]]) for name in ("weights", "buffers", "optimizer")}
        return {**parts, "extra": float(rest.sum()) - sum(parts.values())}

    def live_before(self, batch_size: float, sharding: Sharding = Sharding()) -> float:
        """Bytes live when a step at `batch_size` starts (what `at_rest` counts, and the batch), per process."""
        scales = self._scales(sharding)
        totals = np.asarray([(timeline.before * scales).sum() for timeline in self.timelines])
        powers = np.asarray([batch_size ** d for d in range(self.degree + 1)])
        return float(powers @ (self._pinv @ totals))

    def gradients(self, sharding: Sharding = Sharding()) -> float:
        """Bytes of the gradients once backward is done (per process, after `sharding`)."""
        return float(self.timelines[0].after_backward[_INDEX["gradients"]]) * sharding.scales()["gradients"]

    def per_sample(self, sharding: Sharding = Sharding()) -> float:
        """Bytes the peak grows by per sample between the smallest and the largest traced batch."""
        low, high = self.batch_sizes[0], self.batch_sizes[-1]
        return (self.peak(high, sharding) - self.peak(low, sharding)) / (high - low)

    def largest_batch(self, budget: float, sharding: Sharding = Sharding(), multiple: int = 1,
                      limit: int = 1 << 20) -> int:
        """The largest batch per process (a multiple of `multiple`) whose peak stays within `budget` bytes; 0 if none
        does. The peak grows with the batch, so a doubling then a bisection finds it."""
        if self.peak(multiple, sharding) > budget:
            return 0
        low, high = 1, 2  # in units of `multiple`
        while high * multiple <= limit and self.peak(high * multiple, sharding) <= budget:
            low, high = high, high * 2
        if high * multiple > limit:
            return low * multiple
        while high - low > 1:
            middle = (low + high) // 2
            if self.peak(middle * multiple, sharding) <= budget:
                low = middle
            else:
                high = middle
        return low * multiple


__all__ = ["CATEGORIES", "Sharding", "StepMemory", "StepOptions", "StepTracker", "StepWorkload", "Timeline",
           "TrainingStep", "fake_process_group", "measured_step_peak", "trace_step_memory", "with_host_values"]
