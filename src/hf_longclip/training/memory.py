"""What one training step holds in memory, traced rather than estimated.

The step the loop runs (`hf_longclip.training.loop.train`: the task's forward and objective, or gradient caching's
two passes; backward; gradient clipping; AdamW; the task's after-step hook) runs on fake tensors
(`torch._subclasses.fake_tensor.FakeTensorMode`: shapes, dtypes and devices, no data, no arithmetic), under a
dispatch mode (`StorageLedger`) that keeps the bytes of every live tensor storage, sorted by what it holds
(`CATEGORIES`: weights, buffers, gradients, optimizer state, the batch, the objective's extras, activations and
temporaries), after every operator. The result (`StepMemory`) is that timeline at a few batch sizes; between them
every operator's live bytes are fitted as a polynomial of the batch (degree 2: the B x N*B similarity matrices of
the gathered batch), so the peak at any batch is the largest of them, whichever operator it falls on.

    memory = trace_step_memory(build, StepOptions(precision="bf16", gradient_checkpointing=True), (8, 16, 24))
    memory.peak(128, Sharding(zero_stage=2, processes=8))        # bytes per process
    memory.largest_batch(80 * 2**30, Sharding(2, 8))

Where the trace is exact and where it is not:

- The batch's contrastive gather across processes runs through a fake process group of `processes` ranks
  (`torch.testing._internal.distributed.fake_pg`): the gathered rows and the B x N*B logits are in the trace.
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
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import MethodType

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from .task import Task, sum_of_terms

CATEGORIES = ("weights", "buffers", "gradients", "optimizer", "inputs", "extra", "activations")
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


class StorageLedger(TorchDispatchMode):
    """Live bytes of every tensor storage an operator made inside it, by category (`CATEGORIES`), after each
    operator (`events`, when `recording`). A new storage takes the category `category` says; `tag` moves storages
    (made inside or outside the ledger) to another. A storage leaves when its last tensor is freed (a weak-reference
    finalizer), so views and in-place results are counted once."""

    def __init__(self):
        super().__init__()
        self._entries = WeakIdKeyDictionary()  # storage -> [bytes, category index]
        self.live = [0] * len(CATEGORIES)
        self.category = "activations"
        self.recording = False
        self.events: list[tuple[int, ...]] = []

    def _free(self, entry: list) -> None:
        self.live[entry[1]] -= entry[0]

    def _storages(self, values) -> Iterable[torch.UntypedStorage]:
        for value in tree_flatten(values)[0]:
            if isinstance(value, torch.Tensor):
                yield value.untyped_storage()

    def tag(self, values, category: str) -> None:
        """Count the storages of the tensors in `values` (any pytree) as `category` from now on."""
        index = _INDEX[category]
        for storage in self._storages(values):
            entry = self._entries.get(storage)
            if entry is None:
                self._add(storage, index)
            elif entry[1] != index:
                self.live[entry[1]] -= entry[0]
                self.live[index] += entry[0]
                entry[1] = index

    def retag(self, source: str, target: str) -> None:
        """Count every live storage of category `source` as `target` from now on."""
        old, new = _INDEX[source], _INDEX[target]
        for entry in self._entries.values():
            if entry[1] == old:
                entry[1] = new
        self.live[new] += self.live[old]
        self.live[old] = 0

    def _add(self, storage: torch.UntypedStorage, index: int) -> None:
        entry = [storage.nbytes(), index]
        self._entries[storage] = entry
        self.live[index] += entry[0]
        weakref.finalize(storage, self._free, entry)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and _is_fake(args[0]):
            # a value read on the host has no data here (`_host_value`)
            return _host_value(args[0])
        out = func(*args, **(kwargs or {}))
        index = _INDEX[self.category]
        for storage in self._storages(out):
            if storage not in self._entries:
                self._add(storage, index)
        if self.recording:
            self.events.append(tuple(self.live))
        return out


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
    categories), the index of the first operator of the optimizer's step (gradient clipping), the live bytes before
    the step (its batch made), the operators of the objective over the whole batch (`task.loss`), the live bytes
    once backward is done and the seconds the trace took."""

    batch_size: int
    events: np.ndarray
    optimizer_start: int
    before: np.ndarray
    loss_span: tuple[int, int]  # the objective over the whole batch, to the next chunk's encoding or the optimizer
    after_backward: np.ndarray
    seconds: float


class _OneProcess:
    """What `gradient_cache.cached_backward` and the tasks' after-step hooks ask of an Accelerator, for one process
    without a wrapper."""

    def __init__(self):
        from accelerate.utils import DistributedType

        self.distributed_type, self.device, self.sync_gradients = DistributedType.NO, torch.device("cpu"), True

    def no_sync(self, model):
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

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
    import torch.distributed._tools.fake_collectives  # noqa: F401 (collectives on fake tensors)
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=processes)
    try:
        with warnings.catch_warnings():  # torch.distributed.nn.functional.all_gather's deprecation notice
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _convertible_fake_parameters(fake):
    """`module.to(...)` of fake parameters (peft's adapters placed like their layer, OneLIP's teacher put in the
    model's dtype): torch swaps a fake parameter with its converted copy, which it refuses while the fake mode's memo
    of converted tensors holds a weak reference to either; the memo (a cache) is emptied before each swap."""
    swap = torch.utils.swap_tensors

    def swap_tensors(first, second):
        fake.fake_tensor_converter.tensor_memo.clear()
        return swap(first, second)

    torch.utils.swap_tensors = swap_tensors
    try:
        yield
    finally:
        torch.utils.swap_tensors = swap


def _autocast_forward(model: torch.nn.Module, device_type: str) -> None:
    """`model.forward` as `Accelerator.prepare` wraps it under mixed precision: bf16 autocast, outputs cast to fp32."""
    from accelerate.utils import convert_outputs_to_fp32

    forward = model.forward.__func__
    autocast = torch.autocast(device_type, dtype=torch.bfloat16)
    model.forward = MethodType(convert_outputs_to_fp32(autocast(forward)), model)


def _optimizer(model: torch.nn.Module, options: StepOptions) -> torch.optim.Optimizer:
    from .optimizer import parameter_groups

    groups = parameter_groups(model, options.weight_decay, 1e-5)
    return torch.optim.AdamW(groups, lr=1e-5, betas=(0.9, 0.98), foreach=options.foreach)


def _trained(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [param for param in model.parameters() if param.requires_grad]


class TrainingStep:
    """One optimizer step of `workload` as the loop runs it under `options`: gradient checkpointing, the model's
    forward under bf16 autocast as accelerate wraps it (unless `options.deepspeed`: bf16 weights then), the task's
    loss (or gradient caching's two passes), backward, gradient clipping, AdamW over the loop's parameter groups,
    `zero_grad(set_to_none=True)`, the task's after-step hook. On real tensors (benchmarks/gpu_suite.py measures it)
    or traced: with a `ledger`, it marks where in the ledger's events the objective over the whole batch
    (`task.loss`), each encoding and the optimizer's step start, and counts gradients and the task's additions to
    the batch (queued negatives) as such."""

    def __init__(self, workload: StepWorkload, options: StepOptions, ledger: StorageLedger | None = None):
        self.workload, self.options, self.ledger = workload, options, ledger
        model = self.model = workload.model
        self.task = workload.task
        self.accelerator = _OneProcess()
        self.accelerator.device = next(model.parameters()).device
        if options.gradient_checkpointing:
            with warnings.catch_warnings():  # transformers 5 renames it; the loop still calls this name
                warnings.simplefilter("ignore", FutureWarning)
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if options.precision == "bf16" and not options.deepspeed:
            _autocast_forward(model, self.accelerator.device.type)
        model.train()
        self.optimizer = _optimizer(model, options)
        self.loss_span, self.optimizer_start, self.encode_starts, self.after_backward = (0, 0), 0, [], None
        if ledger is not None:
            self._mark(ledger)

    def _events(self) -> int:
        return len(self.ledger.events)

    def _mark(self, ledger: StorageLedger) -> None:
        task = self.task
        for param in _trained(self.model):  # a parameter's .grad counts as a gradient once accumulated
            param.register_post_accumulate_grad_hook(lambda p: ledger.tag([p.grad], "gradients"))
        loss, prepare, encode = task.loss, task.prepare_step, task.encode

        def marked_loss(model, encoded, batch):
            begin = self._events()
            terms = loss(model, encoded, batch)
            self.loss_span = (begin, self._events())
            return terms

        def marked_encode(model, batch):
            self.encode_starts.append(self._events())
            return encode(model, batch)

        def prepare_step(model, batch):  # what the task adds to the batch (queued negatives) is its extra
            prepared = prepare(model, batch)
            ledger.tag([value for key, value in prepared.items() if key not in batch], "extra")
            return prepared

        task.loss, task.prepare_step, task.encode = marked_loss, prepare_step, marked_encode

    def segments(self) -> tuple[int, int]:
        """Where the objective over the whole batch starts, and where what follows it before the next chunk's
        encoding ends (gradient caching: its gradient; otherwise: the whole backward)."""
        begin, end = self.loss_span
        later = [start for start in self.encode_starts if start >= end]
        return begin, min(later) if later else self.optimizer_start

    def __call__(self, batch: dict) -> None:
        from .gradient_cache import cached_backward

        task, model, options, ledger = self.task, self.model, self.options, self.ledger
        self.encode_starts = []
        if options.chunk:
            cached_backward(task, model, batch, options.chunk, self.accelerator)
        else:
            sum_of_terms(task.compute_loss(model, batch)).backward()
        if ledger is not None:
            self.optimizer_start, self.after_backward = self._events(), np.asarray(ledger.live, dtype=np.float64)
            ledger.category = "optimizer"  # the optimizer step's temporaries
        if options.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(_trained(model), options.max_grad_norm, foreach=options.foreach)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if ledger is not None:
            ledger.category = "activations"
        task.after_optimizer_step(model, self.accelerator)


def live_step_peak(step: "TrainingStep", batch) -> int:
    """Bytes of the storages one real step of `step` on `batch` creates at its peak, above what lives before it (the
    weights, buffers, batch and optimizer state): the measurement a planner's prediction is checked against on the
    CPU, where no allocator counts torch's memory."""
    ledger = StorageLedger()
    ledger.tag([list(step.model.parameters()), list(step.model.buffers()), batch,
                [list(state.values()) for state in step.optimizer.state.values()]], "weights")
    before = sum(ledger.live)
    ledger.recording = True
    with ledger:
        step(batch)
    return int(max(sum(event) for event in ledger.events) - before)


def trace_step_memory(build: Callable[[], StepWorkload], options: StepOptions,
                      batch_sizes: Sequence[int]) -> "StepMemory":
    """Trace one steady-state optimizer step of the workload `build()` makes (after a first step at the smallest
    batch: AdamW's state, what the task places once) at each of `batch_sizes` (per process; with `options.chunk`,
    the contrastive batch), on fake tensors; see the module docstring."""
    from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode

    if len(batch_sizes) < 2 or sorted(set(batch_sizes)) != list(batch_sizes):
        raise ValueError(f"trace at two or more increasing batch sizes, got {batch_sizes}")
    ledger = StorageLedger()
    timelines = []
    fake = FakeTensorMode()
    default_dtype = torch.get_default_dtype()
    try:
        with fake_process_group(options.processes), _convertible_fake_parameters(fake), fake, ledger:
            # DeepSpeed's bf16 weights: built in bf16 (cheaper than converting fake modules)
            torch.set_default_dtype(torch.bfloat16 if options.deepspeed and options.precision == "bf16"
                                    else default_dtype)
            with FakeCopyMode(fake):  # a deep copy (OneLIP's teacher) stays in this fake mode
                workload = build()
            torch.set_default_dtype(default_dtype)
            model = workload.model
            step = TrainingStep(workload, options, ledger)
            step(workload.make_batch(batch_sizes[0]))
            gc.collect()
            # what the first step leaves alive besides weights and AdamW's state is the task's: kept position rows,
            # a frozen teacher, queues
            ledger.retag("activations", "extra")
            ledger.tag([dict(model.named_buffers())], "buffers")
            ledger.tag([list(model.parameters())], "weights")
            ledger.tag(workload.extra() if callable(workload.extra) else workload.extra, "extra")
            ledger.tag([list(state.values()) for state in step.optimizer.state.values()], "optimizer")
            for batch_size in batch_sizes:
                start = time.perf_counter()
                batch = workload.make_batch(batch_size)
                ledger.tag([batch], "inputs")
                before = np.asarray(ledger.live, dtype=np.float64)
                ledger.events, ledger.recording = [], True
                step(batch)
                ledger.recording = False
                del batch
                timelines.append(Timeline(batch_size, np.asarray(ledger.events, dtype=np.float64),
                                          step.optimizer_start, before, step.segments(), step.after_backward,
                                          time.perf_counter() - start))
            parameters = sum(param.numel() for param in model.parameters())
            trained = sum(param.numel() for param in _trained(model))
    finally:
        torch.set_default_dtype(default_dtype)
    return StepMemory(timelines, parameters, trained, chunked=bool(options.chunk))


class StepMemory:
    """Traced timelines of one step at several batch sizes (`trace_step_memory`) and what follows from them: the
    peak per process at any batch under a `Sharding`, what it is made of, and the largest batch under a budget.

    Each timeline is cut in three: before the objective over the whole batch, from it to the next chunk's encoding
    (gradient caching) or the optimizer, and the rest. A part made of the same operators at every traced batch is
    fitted operator by operator (bytes as a polynomial of degree 2 in the batch); a part that is not (gradient
    caching's chunk passes, whose number grows with the batch; a decomposition whose backward branches on the
    batch's size) is fitted by its largest operator at each traced batch, by category (degree 1 for chunk passes:
    their peak grows with the cached per-sample outputs; else 2)."""

    def __init__(self, timelines: list[Timeline], parameters: int, trained_parameters: int, chunked: bool = False):
        self.timelines, self.parameters, self.trained_parameters = timelines, parameters, trained_parameters
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
        begin, end = timeline.loss_span
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
        """Bytes of each category before the step starts (weights, buffers, optimizer state, extras), per process."""
        scales = sharding.scales()
        before = self.timelines[0].before
        return {name: float(before[_INDEX[name]]) * scales[name] for name in ("weights", "buffers", "optimizer",
                                                                                 "extra")}

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


__all__ = ["CATEGORIES", "Sharding", "StepMemory", "StepOptions", "StepWorkload", "StorageLedger", "Timeline",
           "TrainingStep", "fake_process_group", "live_step_peak", "trace_step_memory", "with_host_values"]
