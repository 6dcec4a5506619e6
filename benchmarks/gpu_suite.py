"""The GPU suite: one training step of every model of the library at CLIP ViT-B/16 size, against transformers' own
CLIPModel, measured in one process on one GPU (H100 / H200), eager and compiled. Compiled is the whole step as the
training loop's `--torch_compile` compiles it (`hf_longclip.training.compile.compile_step` of the task's
`device_step`: encoders and objective; the CLIP baselines' model-and-loss call), not the model alone.

Per configuration: samples/s, step time (median of `--steps` steps after warm-up, CUDA events), peak memory
(`torch.cuda.max_memory_allocated`, reset per configuration), model FLOPs of one step (forward + backward, counted by
`torch.utils.flop_counter.FlopCounterMode` on the eager model, same batch), MFU (FLOPs / step time / the device's
dense bf16 peak, read from its name) and host syncs per steady-state step (`cudaStreamSynchronize`,
`cudaDeviceSynchronize`, `aten::item`, `aten::_local_scalar_dense` events in a torch.profiler capture of
`--sync_steps` steps; point 3 of the issue: none in the steady state).

A step is what the library's training loop runs: `terms = task.compute_loss(model, batch)`, the sum of the terms
back-propagated, `AdamW(fused=True).step()`, `zero_grad(set_to_none=True)`, then the task's after-step hook (the
logit scale clamped to [0, ln 100] in place, the task's step counter advanced; without the `.item()` the hook
returns for logging). ViT-B/16 towers at 224 px (vision 768 wide, 12 layers, 12 heads, patch 16; text 512 wide,
12 layers, 8 heads, 49,408 tokens; projection 512), bf16 autocast, SDPA attention, random data already on the
device. The batch is the largest power of two up to `--max_batch` (512) that fits (halved on out-of-memory); a
model compared with a baseline (HiMo, OneLIP and DITM with CLIP-248, F-CAST with FLAIR) starts its search at the
baseline's batch, and a compiled configuration at its eager one, so that compared step times share a batch.

Configurations (`--configs` takes names or ids such as `himo/compile`; `--modes eager,compile`):
    clip77, clip248   transformers' CLIPModel, symmetric InfoNCE (`return_loss=True`), texts of 77 / 248 tokens
    <method>          every method of the registry (`hf_longclip.recipes.registry`: himo, longclip, onelip, ditm,
                      cast, flair, fcast, ...), its model and task as its spec builds them at ViT-B/16
                      (`Method.build`), batches as its collator makes them (`Method.example_batch`) of random
                      values, texts with their attention masks; OneLIP's teacher, a frozen 77-token CLIPTextModel
                      of the same size, is in the step and its FLOPs
    onelip_hnm        OneLIP with PO-HNM's hard negatives: M = 1024 queued per sample, gathered from a bank of
                      1.2M caption embeddings on the device (the registry's stand-in: no faiss, no disk)
    text_features     forward of OneLIP's RoPE text encoder (OneLIPTextModel) against transformers' CLIPTextModel,
                      248 tokens, bf16, inference mode: the throughput ratio
    flair_scoring     FLAIR's text-conditioned retrieval scoring (`hf_longclip.evaluation.scoring.pooled_scores`):
                      a batch of images' 196 tokens against 1,024 texts, every pair pooled; pairs/s

Targets of the issue, printed at the end from this run's numbers (ratios of per-sample step times, each mode):
    HiMo / CLIP-248 <= 1.05, OneLIP / CLIP-248 <= 1.3, DITM / CLIP-248 <= 1.1, F-CAST / FLAIR <= 1.0,
    RoPE text features / CLIPTextModel throughput >= 0.95, CLIP-248 MFU >= 40%.

    python benchmarks/gpu_suite.py                                 # everything within --time_budget_s (420 s)
    python benchmarks/gpu_suite.py --configs clip248,himo --modes compile
    python benchmarks/gpu_suite.py --profile onelip/eager          # + a trace of 3 steady-state steps of one config
    python benchmarks/gpu_suite.py --tiny                          # the same code path on the CPU, 1-2 min
    python benchmarks/gpu_suite.py --configs himo --modes eager     # the memory check and one configuration

Memory check, first (point 2 of "What fits where"; `--no_memory_check` skips it): the memory planner
(`hf_longclip.recipes.planner`, `hf-longclip plan`) traces a ViT-L/14 HiMo-CLIP step (bf16 mixed, with and without
gradient checkpointing) on fake tensors on the CPU, then the same step (`hf_longclip.training.memory.TrainingStep`:
the loop's `optimizer_step` with the model's forward under bf16 autocast as accelerate runs it, MoLo, backward,
clipping, multi-tensor AdamW) runs on the GPU
at batches 32 and 128 after a first step; its `torch.cuda.max_memory_allocated` (reset per step) against the
planner's peak, and the growth over the step (peak minus what was allocated before it) against the planner's. With
--tiny: the tiny size on the CPU, measured as the live bytes of the step's tensors (MemTracker's count over the
real step). Results: `memory_check` in gpu_suite.json and a table in gpu_suite.md; target: within 10%.

Eager configurations run first (an estimated 15 s each on an H100), then the compiled ones, most wanted first (a
compile: a minute or more); a configuration that would not fit in what is left of the time budget is recorded
as skipped, one that runs past it is stopped. `<out>/gpu_suite.json` and `<out>/gpu_suite.md` are rewritten after
every configuration; an error in one configuration (a failed compile, say) is recorded with its message and
traceback and the suite goes on. Compiled entries carry torch.compile's graph and graph-break counts. With
`--profile`, `<out>/profile_<config>.json.gz` (Chrome trace) and `.txt` (operator table, the Python stack of every
host sync). On the CPU (`--tiny`) the sync count is of scalar reads (`_local_scalar_dense`; the CPU has no CUDA
runtime events), leaving out those of the CPU's fused AdamW kernel, which a GPU does not make; it includes the
library's input checks in a compiled step, device assertions (`torch._assert_async`) that read their scalar on the
CPU only (a GPU checks them on the device, without a sync). The repository's
`src` is put on `sys.path` here, so the library need not be installed; OpenCV and scikit-image, which only CAST's
image processor imports, are stubbed where missing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import gzip
import importlib
import importlib.machinery
import json
import os
import platform
import signal
import statistics
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def stub_missing_modules(names=("cv2", "skimage", "skimage.segmentation")) -> list[str]:
    """Empty stand-ins for the modules among `names` that cannot be imported. CAST's image processor imports OpenCV
    and scikit-image at the top of its module, so `import hf_longclip` needs them, but the suite never computes
    superpixels (its own are a fixed grid)."""
    stubbed = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
            stubbed.append(name)
    return stubbed


STUBBED_MODULES = stub_missing_modules()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPTextModel  # noqa: E402

from hf_longclip.evaluation.scoring import PAIRS_PER_CHUNK, pooled_scores  # noqa: E402
from hf_longclip.modeling_common.dual_encoder import end_of_text_positions  # noqa: E402
from hf_longclip.models.fcast.convert_flair import FLAIR_POOL_HEADS  # noqa: E402
from hf_longclip.models.fcast.pooling import AttentionPool  # noqa: E402
from hf_longclip.models.onelip.configuration_onelip import OneLIPTextConfig  # noqa: E402
from hf_longclip.models.onelip.modeling_onelip import OneLIPTextModel  # noqa: E402
from hf_longclip.recipes.registry import (  # noqa: E402
    BOS,
    LONG_LENGTH,
    SHORT_LENGTH,
    SIZES,
    BuildOptions,
    ModelSize,
    PlaceholderInputs,
    method,
    method_names,
)
from hf_longclip.training.compile import compile_step  # noqa: E402
from hf_longclip.training.memory import OneProcessAccelerator  # noqa: E402
from hf_longclip.training.provenance import cpu_name  # noqa: E402
from hf_longclip.training.task import Task, clamp_logit_scale  # noqa: E402

SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::item", "aten::_local_scalar_dense")
STEP_LABEL = "gpu_suite_step"
# dense bf16 tensor-core peaks; the first entry whose words all appear in the device name wins
PEAK_BF16_FLOPS = (
    (("h200",), 989.4e12, "H200"),
    (("h100", "pcie"), 756e12, "H100 PCIe"),
    (("h100",), 989.4e12, "H100 SXM"),
    (("a100",), 312e12, "A100"),
)
CPU_NOMINAL_PEAK = 1e12
PRIOR_SECONDS = {"eager": 30.0, "compile": 90.0}  # expected length of a configuration until one has been measured


# --tiny or not: the registry's size, the classifier's classes, PO-HNM's M queued per sample and its bank's captions
SUITE_SIZES = {False: ("ViT-B/16", dict(num_labels=1000, hard_negatives=1024, bank_captions=1_200_000)),
               True: ("tiny", dict(num_labels=10, hard_negatives=16, bank_captions=1000))}


def peak_bf16_flops(device_name: str) -> tuple[float | None, str]:
    """(dense bf16 peak FLOP/s, which entry) for a CUDA device name; (None, ...) for a device not in the table."""
    name = device_name.lower()
    for words, flops, label in PEAK_BF16_FLOPS:
        if all(word in name for word in words):
            return flops, label
    return None, f"unknown device {device_name!r}: pass --peak_tflops"


def is_out_of_memory(error: BaseException) -> bool:
    """An allocation failure, raised as such or wrapped (a compiled graph's runtime error)."""
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def largest_fitting_batch(attempt: Callable[[int], None], start: int, release: Callable[[], None]) -> int:
    """The first of start, start / 2, ... down to 1 for which `attempt(batch)` runs without running out of memory;
    `release()` frees what a failed attempt left. Any other error propagates."""
    batch = start
    while batch >= 1:
        try:
            attempt(batch)
            return batch
        except Exception as error:  # noqa: BLE001 (re-raised unless out of memory)
            if not is_out_of_memory(error):
                raise
        release()  # outside the except block: the traceback, and the tensors its frames hold, are gone
        batch //= 2
    raise RuntimeError("not even a batch of one fits in memory")


class BudgetExceeded(BaseException):
    """Raised by SIGALRM when a configuration runs past the time budget; a BaseException, so that no `except
    Exception` on the way (torch.compile has several) swallows it."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise BudgetExceeded in the main thread after `seconds`."""
    def expire(signum, frame):
        raise BudgetExceeded
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------------------------
# Random data, made on the device


class RandomData:
    """Random inputs on the device, with the methods of the registry's `PlaceholderInputs` (each method's
    `example_batch` makes its batch from them)."""

    def __init__(self, size: ModelSize, device: torch.device):
        self.size, self.device = size, device
        self.generator = torch.Generator(device).manual_seed(0)

    def texts(self, rows: int, length: int) -> dict:
        """{"input_ids", "attention_mask"} of (rows, length), as a processor pads to the longest: start token, random
        tokens, the end-of-text token at a random position in the second half, then padding with it (attended, as
        the longest text's would be). Every model here pools at its first occurrence (`end_of_text_positions`),
        which this checks."""
        bos, eos = BOS % self.size.vocab_size, self.size.eos_token_id
        ids = torch.randint(0, min(bos, eos), (rows, length), device=self.device, generator=self.generator)
        ends = torch.randint(length // 2, length, (rows, 1), device=self.device, generator=self.generator)
        ids = torch.where(torch.arange(length, device=self.device) >= ends, eos, ids)
        ids[:, 0] = bos
        if not torch.equal(end_of_text_positions(ids, eos), ends[:, 0]):
            raise AssertionError("texts would not pool at their end-of-text token")
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def images(self, rows: int) -> torch.Tensor:
        side = self.size.image_size
        return torch.randn(rows, 3, side, side, device=self.device, generator=self.generator)

    def superpixels(self, rows: int) -> torch.Tensor:
        """(rows, H, W) CASTImageProcessor-style label maps: a fixed grid of patch-sized squares, ids 0..S-1."""
        return PlaceholderInputs(self.size, device=self.device).superpixels(rows)

    def scores(self, rows: int) -> torch.Tensor:
        return torch.rand(rows, device=self.device, generator=self.generator)

    def labels(self, rows: int, classes: int) -> torch.Tensor:
        return torch.randint(0, classes, (rows,), device=self.device, generator=self.generator)

    def unit_vectors(self, *shape: int) -> torch.Tensor:
        return F.normalize(torch.randn(*shape, device=self.device, generator=self.generator), dim=-1)


# ---------------------------------------------------------------------------------------------------------------
# The configurations: each method of the registry as its spec builds it, and transformers' CLIP as the baseline


@dataclass
class Workload:
    """One configuration's training step: `loss(model, batch)` gives the objective's named terms (the model passed
    is the trained one or its compiled wrapper), `make_batch(b)` a batch of b samples on the device, `after_step()`
    the task's after-optimizer-step hook (no host syncs: what it reports stays on the device)."""

    model: torch.nn.Module
    loss: Callable[[torch.nn.Module, dict], dict]
    make_batch: Callable[[int], dict]
    after_step: Callable[[], None]
    note: str = ""
    task: Task | None = None  # the library's task: compiled as the loop compiles it (its `device_step`)


def build_clip(size: ModelSize, options: BuildOptions, data: RandomData, length: int) -> Workload:
    """transformers' CLIPModel, its own symmetric InfoNCE; 248 tokens need a 248-row position table."""
    model = CLIPModel(CLIPConfig(text_config=size.text_config(length), vision_config=size.vision_config(),
                                 projection_dim=size.projection_dim))
    return Workload(
        model, lambda m, batch: {"contrastive_loss": m(**batch, return_loss=True).loss},
        lambda b: {**data.texts(b, length), "pixel_values": data.images(b)},
        lambda: clamp_logit_scale(OneProcessAccelerator(data.device), model))  # the tasks' clamp: no host read


def build_method(name: str, size: ModelSize, options: BuildOptions, data: RandomData) -> Workload:
    """The method `name` of the registry: its model and task at `size` (`Method.build`), batches as its collator
    makes them of random values (`Method.example_batch`), its task's after-step hook."""
    spec = method(name)
    model, task = spec.build(size, options)
    note = "; ".join(spec.plan_notes(options))
    return Workload(model, task.compute_loss, lambda b: spec.example_batch(size, b, data, options),
                    lambda: task.after_optimizer_step(model, OneProcessAccelerator(data.device)), note, task)


def build_text_encoders(size: ModelSize) -> dict[str, torch.nn.Module]:
    """OneLIP's RoPE text encoder and transformers' CLIPTextModel (a 248-row position table), same size."""
    return {"onelip_text": OneLIPTextModel(OneLIPTextConfig(**size.text_config(LONG_LENGTH), base_length=SHORT_LENGTH)),
            "clip_text": CLIPTextModel(CLIPTextConfig(**size.text_config(LONG_LENGTH)))}


TRAINING = {  # name -> builder(size, options, data); eager configurations run in this order, then text features
    "clip77": lambda size, options, data: build_clip(size, options, data, SHORT_LENGTH),
    "clip248": lambda size, options, data: build_clip(size, options, data, LONG_LENGTH),
    **{name: (lambda size, options, data, name=name: build_method(name, size, replace(options, hard_negatives=0),
                                                                  data)) for name in method_names()},
    "onelip_hnm": partial(build_method, "onelip"),  # OneLIP with PO-HNM's queued negatives (`BuildOptions`)
}
DESCRIPTIONS = {
    "clip77": "transformers CLIPModel, symmetric InfoNCE, 77 tokens",
    "clip248": "transformers CLIPModel, symmetric InfoNCE, 248 tokens",
    **{name: method(name).summary for name in method_names()},
    "onelip_hnm": "OneLIP with PO-HNM hard negatives (stand-in queues gathered from a bank on the device)",
    "text_features": "forward of OneLIPTextModel (RoPE) and of CLIPTextModel, 248 tokens, inference",
    "flair_scoring": "FLAIR's conditioned retrieval scoring: images x 1,024 texts, every pair pooled, inference",
}
TEXT_FEATURES = "text_features"
FLAIR_SCORING = "flair_scoring"
SCORING_TEXTS = 1024  # texts every image of a batch is scored against, conditioned on each
NAMES = (*TRAINING, TEXT_FEATURES, FLAIR_SCORING)
FIRST_COMPILED = ("clip248", "himo", TEXT_FEATURES, "onelip", "ditm", "flair", "fcast")  # the rest follow, in order
COMPILE_ORDER = (*FIRST_COMPILED, *(name for name in NAMES if name not in FIRST_COMPILED))
RATIOS = (  # (label, numerator, denominator, target): per-sample step times of one mode
    ("HiMo / CLIP-248 step", "himo", "clip248", 1.05),
    ("OneLIP / CLIP-248 step", "onelip", "clip248", 1.3),
    ("OneLIP + PO-HNM / CLIP-248 step", "onelip_hnm", "clip248", None),
    ("DITM / CLIP-248 step", "ditm", "clip248", 1.1),
    ("F-CAST / FLAIR step", "fcast", "flair", 1.0),
    ("CLIP-248 / CLIP-77 step", "clip248", "clip77", None),
)
# the baseline each model is compared with: its batch search starts at the baseline's batch (same mode)
BASELINE = {"himo": "clip248", "onelip": "clip248", "onelip_hnm": "clip248", "ditm": "clip248", "fcast": "flair"}


# ---------------------------------------------------------------------------------------------------------------
# Measurement


@dataclass
class Measurement:
    """What `Suite.measure` found: the batch, its inputs, the calls timed (name -> call), their times (seconds),
    the peak memory (bytes, None on the CPU) and the seconds of the first successful call (with its compile)."""

    batch_size: int
    inputs: object
    calls: dict[str, Callable[[], None]]
    times: dict[str, list[float]]
    peak_memory: int | None
    first_call_s: float


class Suite:
    """The run: device, options, the results so far and the time budget."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        size_name, options = SUITE_SIZES[bool(args.tiny)]
        self.sizes = SIZES[size_name]
        self.options = BuildOptions(target="gpu" if self.cuda else "cpu", **options)
        self.data = RandomData(self.sizes, self.device)
        self.started = time.perf_counter()
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, dict] = {}
        self.memory_check: dict | None = None
        self.flops: dict[tuple[str, int], int | None] = {}  # (name, batch) -> FLOPs of a step, for both modes
        if self.cuda:
            self.device_name = torch.cuda.get_device_name(self.device)
            peak, self.peak_label = peak_bf16_flops(self.device_name)
        else:
            self.device_name = f"cpu ({cpu_name()}, {torch.get_num_threads()} threads)"
            peak, self.peak_label = CPU_NOMINAL_PEAK, "nominal 1 TFLOP/s (CPU: MFU is not meaningful)"
        if args.peak_tflops:
            peak, self.peak_label = args.peak_tflops * 1e12, f"--peak_tflops {args.peak_tflops:g}"
        self.peak_flops = peak

    # -- plumbing -------------------------------------------------------------------------------------------------

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def compile(self, module: torch.nn.Module) -> torch.nn.Module:
        return torch.compile(module, backend=self.args.compile_backend, mode=self.args.compile_mode)

    def compiled_loss(self, workload: Workload) -> Callable[[torch.nn.Module, dict], dict]:
        """The whole step compiled, encoders and objective, as the training loop's `--torch_compile` does: a task's
        `device_step` (its host work, `prepare_step` and `finish_step`, outside), else the workload's loss."""
        options = dict(backend=self.args.compile_backend, mode=self.args.compile_mode)
        if workload.task is None:
            return compile_step(workload.loss, **options)
        device_step = compile_step(workload.task.device_step, **options)
        return lambda module, batch: workload.task.compute_loss(module, batch, device_step)

    def release(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def estimate(self, mode: str) -> float:
        """Expected seconds of a configuration of `mode`: the median of those measured so far, else a prior."""
        done = [r["seconds"] for r in self.results.values() if r.get("mode") == mode and r["status"] == "ok"]
        return statistics.median(done) if done else PRIOR_SECONDS[mode]

    def start_batch(self, name: str, mode: str) -> int:
        """Where the batch search starts: --max_batch, or less: the batch of the same model in eager mode (compiled
        code needs no more memory, and a failed compiled size costs a compile), and that of the baseline it is
        compared with in this mode (a target's ratio is then one of step times at one batch)."""
        keys = [f"{name}/eager", *([f"{BASELINE[name]}/{mode}"] if name in BASELINE else [])]
        return min([self.args.max_batch, *filter(None, (self.results.get(key, {}).get("batch_size") for key in keys))])

    def time_calls(self, calls: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
        """Seconds of each call, `repeats` times, interleaved (order reversed every round); CUDA events on a GPU."""
        times = {name: [] for name in calls}
        for round_index in range(repeats):
            order = list(calls.items()) if round_index % 2 == 0 else list(reversed(calls.items()))
            for name, call in order:
                if self.cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    call()
                    end.record()
                    times[name].append((start, end))
                else:
                    start = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - start)
        self.synchronize()
        if self.cuda:
            times = {name: [start.elapsed_time(end) / 1e3 for start, end in pairs] for name, pairs in times.items()}
        return times

    def count_flops(self, fn: Callable[[], None]) -> int | None:
        """FLOPs of `fn` by FlopCounterMode (matrix products, convolutions, attention); None if it runs out of
        memory (a compiled configuration's batch that eager mode cannot hold)."""
        try:
            with FlopCounterMode(display=False) as counter:
                fn()
            return counter.get_total_flops()
        except Exception as error:  # noqa: BLE001 (re-raised unless out of memory)
            if not is_out_of_memory(error):
                raise
        self.release()
        return None

    def profile(self, fn: Callable[[], None], steps: int, with_stack: bool = False):
        """torch.profiler over `steps` calls of `fn`, each in a `STEP_LABEL` range; returns the profiler and the
        sync events (SYNC_EVENTS) that fall inside those ranges."""
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.synchronize()
        with torch.profiler.profile(activities=activities, with_stack=with_stack) as profiler:
            for _ in range(steps):
                with torch.profiler.record_function(STEP_LABEL):
                    fn()
        events = profiler.events()
        spans = [(e.time_range.start, e.time_range.end) for e in events
                 if e.name == STEP_LABEL and e.device_type == torch.autograd.DeviceType.CPU]
        syncs = [e for e in events if e.name in SYNC_EVENTS
                 and any(start <= e.time_range.start <= end for start, end in spans)]
        if not self.cuda:  # the CPU's fused AdamW kernel reads its step counts as scalars (no such read on a GPU)
            syncs = [e for e in syncs if not any(a.name.startswith("aten::_fused_adam") for a in ancestors(e))]
        return profiler, syncs

    def count_syncs(self, fn: Callable[[], None]) -> dict:
        """Host syncs per step: each SYNC_EVENTS name's count, and the headline: the CUDA runtime's synchronisations
        on a GPU (every `.item()`, `.tolist()`, `bool(tensor)`, `nonzero` ... waits in one), `_local_scalar_dense`
        (scalar reads) on the CPU, which has no CUDA runtime events."""
        steps = self.args.sync_steps
        try:
            _, syncs = self.profile(fn, steps)
        except Exception as error:  # noqa: BLE001 (the configuration's other measurements stand)
            return {"host_syncs_per_step": None, "sync_error": f"{type(error).__name__}: {error}"}
        counts = collections.Counter(e.name for e in syncs)
        per_step = {name: counts[name] / steps for name in SYNC_EVENTS}
        headline = (per_step["cudaStreamSynchronize"] + per_step["cudaDeviceSynchronize"] if self.cuda
                    else per_step["aten::_local_scalar_dense"])
        return {"host_syncs_per_step": headline, "sync_events_per_step": per_step}

    def capture_profile(self, config_id: str, fn: Callable[[], None]) -> dict:
        """--profile: a trace of 3 steady-state steps (Chrome format, gzipped), the operator table and the Python
        stack of every host sync in them; {"error": ...} if that fails (the configuration's measurements stand)."""
        try:
            return self.write_profile(config_id, *self.profile(fn, 3, with_stack=True))
        except Exception as error:  # noqa: BLE001
            return {"error": f"{type(error).__name__}: {error}"}

    def write_profile(self, config_id: str, profiler, syncs) -> dict:
        stem = self.out / f"profile_{config_id.replace('/', '_')}"
        trace = stem.with_suffix(".json")
        profiler.export_chrome_trace(str(trace))
        with open(trace, "rb") as source, gzip.open(f"{trace}.gz", "wb") as target:
            target.writelines(source)
        trace.unlink()
        sort = "self_cuda_time_total" if self.cuda else "self_cpu_time_total"
        stacks = collections.Counter()
        for event in syncs:
            enclosing = list(ancestors(event))
            if any(a.name in SYNC_EVENTS for a in enclosing):  # part of a sync already listed (item -> ... -> cuda)
                continue
            label = event.name
            if event.name.startswith("cuda") and enclosing:  # a runtime call: name the op that made it
                label += f" in {enclosing[0].name}"
            frames = [a.name for a in enclosing if ".py(" in a.name and "torch/" not in a.name]  # with_stack's
            stacks[(label, *frames[:6])] += 1
        lines = [f"{config_id}: 3 steady-state steps\n", profiler.key_averages().table(sort_by=sort, row_limit=40),
                 "\nHost syncs (count over the 3 steps, the op, then the Python frames it ran in, innermost first, "
                 "without torch's):"]
        for (name, *frames), count in stacks.most_common():
            lines.append(f"\n{count:4d} x {name}\n" + "".join(f"         {frame}\n" for frame in frames))
        summary = stem.with_suffix(".txt")
        summary.write_text("\n".join(lines))
        return {"trace": f"{trace.name}.gz", "summary": summary.name}

    # -- configurations -------------------------------------------------------------------------------------------

    def measure(self, name: str, compiled: bool, make_inputs: Callable[[int], object],
                calls_on: Callable[[object], dict[str, Callable[[], None]]],
                on_release: Callable[[], None] = lambda: None) -> Measurement:
        """The batch search (`make_inputs(batch)`, then every call of `calls_on(inputs)` once), --warmup calls of each
        at the batch found, then --steps timed calls of each, interleaved; peak memory from the warm-up on.
        `on_release` frees what a failed attempt leaves outside the inputs (gradients)."""
        held, first_call = {}, {}

        def attempt(batch_size: int) -> None:
            start = time.perf_counter()
            held["inputs"] = make_inputs(batch_size)
            for call in calls_on(held["inputs"]).values():
                call()
            self.synchronize()
            first_call["seconds"] = time.perf_counter() - start

        def release() -> None:
            held.clear()
            on_release()
            if compiled:  # recompile for the smaller batch from scratch, with static shapes
                torch._dynamo.reset()
            self.release()

        batch_size = largest_fitting_batch(attempt, self.start_batch(name, mode_name(compiled)), release)
        calls = calls_on(held["inputs"])
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        for call in calls.values():
            for _ in range(self.args.warmup):
                call()
        times = self.time_calls(calls, self.args.steps)
        peak_memory = torch.cuda.max_memory_allocated(self.device) if self.cuda else None
        return Measurement(batch_size, held["inputs"], calls, times, peak_memory, first_call["seconds"])

    def run_training(self, name: str, compiled: bool) -> dict:
        torch.manual_seed(0)
        with self.device:
            workload = TRAINING[name](self.sizes, self.options, self.data)
        model = workload.model.train()
        loss_terms = self.compiled_loss(workload) if compiled else workload.loss
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True)

        def forward_backward(terms: Callable[[torch.nn.Module, dict], dict], batch: dict) -> None:
            with self.autocast():
                loss = sum(terms(model, batch).values())
            loss.backward()

        def step(batch: dict) -> None:
            forward_backward(loss_terms, batch)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            workload.after_step()

        run = self.measure(name, compiled, workload.make_batch, lambda batch: {"step": lambda: step(batch)},
                           lambda: optimizer.zero_grad(set_to_none=True))
        syncs = self.count_syncs(run.calls["step"])
        key = (name, run.batch_size)
        if key not in self.flops:
            self.flops[key] = self.count_flops(lambda: forward_backward(workload.loss, run.inputs))  # eager: ops seen
            model.zero_grad(set_to_none=True)
        entry = self.entry(name, compiled, run, run.times["step"], self.flops[key])
        entry.update(syncs, note=workload.note, parameters_m=sum(p.numel() for p in model.parameters()) / 1e6,
                     attn_implementation=model.config._attn_implementation)
        if self.args.profile == entry["id"]:
            entry["profile"] = self.capture_profile(entry["id"], run.calls["step"])
        return entry

    def run_text_features(self, compiled: bool) -> dict:
        """Forward of the two text encoders at 248 tokens, bf16 autocast, inference mode, timed interleaved."""
        torch.manual_seed(0)
        with self.device:
            models = {key: model.eval() for key, model in build_text_encoders(self.sizes).items()}
        runners = {key: self.compile(model) if compiled else model for key, model in models.items()}

        def forward(module: torch.nn.Module, ids: torch.Tensor) -> None:
            with torch.inference_mode(), self.autocast():
                module(input_ids=ids)

        run = self.measure(TEXT_FEATURES, compiled,
                           lambda batch_size: self.data.texts(batch_size, LONG_LENGTH)["input_ids"],
                           lambda ids: {key: (lambda runner=runner: forward(runner, ids))
                                        for key, runner in runners.items()})
        entries = {}
        for key, model in models.items():
            flops_key = (f"{TEXT_FEATURES}:{key}", run.batch_size)
            if flops_key not in self.flops:
                self.flops[flops_key] = self.count_flops(lambda model=model: forward(model, run.inputs))
            entries[key] = self.entry(TEXT_FEATURES, compiled, run, run.times[key], self.flops[flops_key])
            entries[key].update(self.count_syncs(run.calls[key]))
        entry, reference = entries["onelip_text"], entries["clip_text"]
        entry.update(note="OneLIPTextModel forward; reference: CLIPTextModel, same size and batch",
                     reference={key: reference[key] for key in ("step_time_ms", "samples_per_s", "flops_per_step",
                                                                  "mfu", "host_syncs_per_step")},
                     throughput_ratio=reference["step_time_ms"] / entry["step_time_ms"],
                     parameters_m=sum(p.numel() for p in models["onelip_text"].parameters()) / 1e6,
                     attn_implementation=models["onelip_text"].config._attn_implementation)
        if self.args.profile == entry["id"]:
            entry["profile"] = self.capture_profile(entry["id"], run.calls["onelip_text"])
        return entry

    def run_flair_scoring(self, compiled: bool) -> dict:
        """`pooled_scores` (FLAIR's pooling block, projection width, 8 heads) of a batch of images' grounding tokens
        against SCORING_TEXTS texts, every pair, in the library's blocks; bf16 autocast, inference mode. Its
        samples/s are images/s; `pairs_per_s` multiplies them by the texts."""
        torch.manual_seed(0)
        width, tokens = self.sizes.projection_dim, self.sizes.num_segments
        with self.device:
            pool = AttentionPool(width, FLAIR_POOL_HEADS, width, value_norm=True, zero_attention=True).eval()
        scorer = types.SimpleNamespace(grounding_pool=self.compile(pool) if compiled else pool)
        queries = self.data.unit_vectors(SCORING_TEXTS, width) * 10  # unnormalised, as the text tower gives them
        units = F.normalize(queries, dim=-1)
        every = torch.arange(SCORING_TEXTS, device=self.device)

        def score(image_tokens: torch.Tensor, module) -> None:
            with torch.inference_mode(), self.autocast():
                pooled_scores(module, image_tokens, None, queries, units, every.expand(len(image_tokens), -1),
                              PAIRS_PER_CHUNK)

        run = self.measure(FLAIR_SCORING, compiled, lambda batch: self.data.unit_vectors(batch, tokens, width),
                           lambda image_tokens: {"score": lambda: score(image_tokens, scorer)})
        flops_key = (FLAIR_SCORING, run.batch_size)
        if flops_key not in self.flops:
            eager = types.SimpleNamespace(grounding_pool=pool)
            self.flops[flops_key] = self.count_flops(lambda: score(run.inputs, eager))
        entry = self.entry(FLAIR_SCORING, compiled, run, run.times["score"], self.flops[flops_key])
        entry.update(self.count_syncs(run.calls["score"]), texts=SCORING_TEXTS, pairs_per_chunk=PAIRS_PER_CHUNK,
                     pairs_per_s=entry["samples_per_s"] * SCORING_TEXTS,
                     note=f"images/s against {SCORING_TEXTS} texts; pairs_per_s = images/s x texts")
        return entry

    def entry(self, name: str, compiled: bool, run: Measurement, times: list[float], flops: int | None) -> dict:
        step = statistics.median(times)
        return {"id": config_id(name, compiled), "name": name, "mode": mode_name(compiled),
                "batch_size": run.batch_size, "step_time_ms": 1e3 * step, "step_times_ms": [1e3 * t for t in times],
                "samples_per_s": run.batch_size / step, "first_step_s": run.first_call_s,
                "peak_memory_gib": None if run.peak_memory is None else run.peak_memory / 2**30,
                "flops_per_step": flops, "achieved_tflops": flops / step / 1e12 if flops else None,
                "mfu": flops / step / self.peak_flops if flops and self.peak_flops else None}

    def run(self, config: str) -> None:
        """One configuration within what is left of the time budget; its entry (ok, error, skipped or timeout)
        joins the results, which are written out."""
        name, mode = config.split("/")
        left = self.args.time_budget_s - self.elapsed()
        index = f"[{len(self.results) + 1}/{len(self.args.plan)}] {config}"
        if left < self.estimate(mode):
            entry = {"status": "skipped", "error": f"time budget: {left:.0f} s left, a {mode} configuration takes "
                                                   f"~{self.estimate(mode):.0f} s", "seconds": 0.0}
        else:
            print(f"{index} ...", flush=True)
            start = time.perf_counter()
            torch._dynamo.utils.counters.clear()
            try:
                with deadline(left):
                    if name == TEXT_FEATURES:
                        entry = self.run_text_features(mode == "compile")
                    elif name == FLAIR_SCORING:
                        entry = self.run_flair_scoring(mode == "compile")
                    else:
                        entry = self.run_training(name, mode == "compile")
                entry["status"] = "ok"
                if mode == "compile":
                    entry["dynamo"] = dynamo_stats()
            except BudgetExceeded:
                entry = {"status": "timeout", "error": f"stopped: the time budget ran out ({left:.0f} s were left)"}
            except Exception as error:  # noqa: BLE001 (one configuration must not end the suite)
                entry = {"status": "error", "error": f"{type(error).__name__}: {error}"[:2000],
                         "traceback": traceback.format_exc()[-6000:]}
            entry["seconds"] = time.perf_counter() - start
            torch._dynamo.reset()
            self.release()
        entry.update(id=config, name=name, mode=mode, description=DESCRIPTIONS[name])
        self.results[config] = entry
        print(f"{index} {describe(entry)}", flush=True)
        self.write()

    def run_memory_check(self) -> None:
        """`memory_check` within the time budget; an error is recorded, not raised."""
        left = self.args.time_budget_s - self.elapsed()
        expected = MEMORY_CHECK_SECONDS["tiny" if self.args.tiny else "gpu"]
        if left < expected:
            self.memory_check = {"status": "skipped", "error": f"time budget: {left:.0f} s left, the memory check "
                                                               f"takes ~{expected:.0f} s"}
        else:
            print("memory check ...", flush=True)
            start = time.perf_counter()
            try:
                with deadline(left):
                    self.memory_check = memory_check(self)
            except BudgetExceeded:
                self.memory_check = {"status": "timeout", "error": f"the time budget ran out ({left:.0f} s left)"}
            except Exception as error:  # noqa: BLE001 (the suite goes on)
                self.memory_check = {"status": "error", "error": f"{type(error).__name__}: {error}"[:2000],
                                     "traceback": traceback.format_exc()[-6000:]}
            self.memory_check["seconds"] = time.perf_counter() - start
            self.release()
        print("\n".join(memory_markdown(self.memory_check)).strip(), flush=True)
        self.write()

    # -- outputs --------------------------------------------------------------------------------------------------

    def environment(self) -> dict:
        return {"device": self.device_name, "torch": torch.__version__, "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version() if self.cuda else None,
                "transformers": transformers.__version__, "python": platform.python_version(),
                "peak_bf16_flops": self.peak_flops, "peak_source": self.peak_label,
                "precision": "bf16 autocast (fp32 weights), fused AdamW", "sizes": asdict(self.sizes),
                "build_options": asdict(self.options),
                "stubbed_modules": STUBBED_MODULES,
                "compile": {"backend": self.args.compile_backend, "mode": self.args.compile_mode},
                "args": {key: value for key, value in vars(self.args).items() if key != "plan"},
                "elapsed_s": self.elapsed()}

    def write(self) -> None:
        report = {"environment": self.environment(), "configs": self.results, "ratios": ratios(self.results),
                  "memory_check": self.memory_check}
        temporary = self.out / "gpu_suite.json.tmp"
        temporary.write_text(json.dumps(report, indent=2, default=str))
        os.replace(temporary, self.out / "gpu_suite.json")
        (self.out / "gpu_suite.md").write_text(markdown(self.results, report["environment"])
                                               + "\n".join(memory_markdown(self.memory_check)) + "\n")


def dynamo_stats() -> dict:
    """torch.compile's counters since they were cleared: graphs compiled (recompilations included) and graph breaks,
    by the first line of their reason."""
    counters = torch._dynamo.utils.counters
    reasons = collections.Counter()
    for reason, count in counters["graph_break"].items():
        reasons[reason.splitlines()[0][:160]] += count
    return {"unique_graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(reasons.values()),
            "graph_break_reasons": dict(reasons.most_common(8))}


def ancestors(event):
    """The profiler events enclosing `event` on its thread, innermost first."""
    while (event := event.cpu_parent) is not None:
        yield event


def mode_name(compiled: bool) -> str:
    return "compile" if compiled else "eager"


def config_id(name: str, compiled: bool) -> str:
    return f"{name}/{mode_name(compiled)}"


def describe(entry: dict) -> str:
    if entry["status"] != "ok":
        return f"{entry['status']}: {entry.get('error', '')} ({entry['seconds']:.1f} s)"
    mfu = "" if entry["mfu"] is None else f", MFU {100 * entry['mfu']:.1f}%"
    return (f"ok: batch {entry['batch_size']}, {entry['step_time_ms']:.1f} ms/step, {entry['samples_per_s']:.0f} "
            f"samples/s{mfu}, {number(entry['host_syncs_per_step'], 'g')} host syncs/step, first step "
            f"{entry['first_step_s']:.1f} s ({entry['seconds']:.1f} s)")


def number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def ratios(results: dict[str, dict]) -> dict[str, dict]:
    """The issue's targets from this run, per mode: ratios of per-sample step times (step time / batch: equal to the
    step-time ratio when both batches are equal, which `batches` shows), the text throughput ratio, CLIP-248's MFU."""
    table = {}
    for mode in ("eager", "compile"):
        def ok(name):
            entry = results.get(f"{name}/{mode}")
            return entry if entry and entry["status"] == "ok" else None

        for label, numerator, denominator, target in RATIOS:
            top, bottom = ok(numerator), ok(denominator)
            if top and bottom:
                value = (top["step_time_ms"] / top["batch_size"]) / (bottom["step_time_ms"] / bottom["batch_size"])
                table[f"{label} ({mode})"] = {"value": value, "target": target, "comparison": "<=",
                                              "met": None if target is None else value <= target,
                                              "batches": [top["batch_size"], bottom["batch_size"]]}
        if text := ok(TEXT_FEATURES):
            value = text["throughput_ratio"]
            table[f"RoPE text features / CLIPTextModel throughput ({mode})"] = {
                "value": value, "target": 0.95, "comparison": ">=", "met": value >= 0.95}
        if (clip := ok("clip248")) and clip["mfu"] is not None:
            table[f"CLIP-248 MFU ({mode})"] = {"value": clip["mfu"], "target": 0.40, "comparison": ">=",
                                               "met": clip["mfu"] >= 0.40}
    return table


def markdown(results: dict[str, dict], environment: dict) -> str:
    lines = [f"GPU suite on {environment['device']}, torch {environment['torch']} (CUDA {environment['cuda']}), "
             f"transformers {environment['transformers']}; MFU against {environment['peak_source']}.", "",
             "| config | batch | step ms | samples/s | peak GiB | TFLOP/step | MFU % | syncs/step | first step s | "
             "status |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for config, entry in results.items():
        if entry["status"] != "ok":
            lines.append(f"| {config} | | | | | | | | | {entry['status']}: {entry['error'][:120]} |")
            continue
        rows = [(config, entry)]
        if "reference" in entry:
            rows.append((f"{config} (CLIPTextModel)", {**entry, **entry["reference"]}))
        for label, row in rows:
            mfu = None if row["mfu"] is None else 100 * row["mfu"]
            flops = None if row["flops_per_step"] is None else row["flops_per_step"] / 1e12
            lines.append(f"| {label} | {row['batch_size']} | {row['step_time_ms']:.1f} | {row['samples_per_s']:.0f} | "
                         f"{number(row['peak_memory_gib'], '.1f')} | {number(flops, '.2f')} | {number(mfu, '.1f')} | "
                         f"{number(row['host_syncs_per_step'], 'g')} | {row['first_step_s']:.1f} | ok |")
    lines += ["", "| ratio | value | target | met |", "|---|---:|---:|---|"]
    for label, ratio in ratios(results).items():
        target = "" if ratio["target"] is None else f"{ratio['comparison']} {ratio['target']:g}"
        met = {True: "yes", False: "**no**", None: ""}[ratio["met"]]
        batches = ratio.get("batches", [0, 0])
        note = f" (batches {batches[0]} vs {batches[1]}: per sample)" if batches[0] != batches[1] else ""
        lines.append(f"| {label}{note} | {ratio['value']:.3f} | {target} | {met} |")
    return "\n".join(lines) + "\n"


MEMORY_CHECK = {"gpu": ("ViT-L/14", (32, 128)), "tiny": ("tiny", (4, 8))}  # planner size, batches measured
MEMORY_CHECK_SECONDS = {"gpu": 150.0, "tiny": 60.0}  # expected length of the memory check


def measured_step_memory(step, batch: dict, cuda: bool) -> tuple[int | None, int]:
    """(peak bytes allocated during `step(batch)` (a `TrainingStep`), growth over what was allocated before it):
    CUDA's allocator counters on a GPU; on the CPU (no counter) the live tensor bytes MemTracker counts over the
    real step, starting from the model's, the optimizer's and the batch's (no absolute peak)."""
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step(batch)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        return peak, peak - before
    from hf_longclip.training.memory import measured_step_peak

    return None, measured_step_peak(step, batch)


def memory_check(suite: "Suite") -> dict:
    """The planner's prediction against the measured step (see the module docstring)."""
    from hf_longclip.recipes.planner import PlanSettings, step_workload
    from hf_longclip.training.memory import TrainingStep, trace_step_memory

    size, batches = MEMORY_CHECK["tiny" if suite.args.tiny else "gpu"]
    rows = []
    for checkpointing in (False, True):
        settings = PlanSettings(size=size, method="himo", gradient_checkpointing=checkpointing,
                                target="gpu" if suite.cuda else "cpu")
        start = time.perf_counter()
        memory = trace_step_memory(lambda: step_workload(settings), settings.step_options(),
                                   settings.traced_batch_sizes)
        trace_s = time.perf_counter() - start
        torch.manual_seed(0)
        with suite.device:
            workload = step_workload(settings)
            step = TrainingStep(workload, settings.step_options())
            step(workload.make_batch(batches[0]))  # AdamW's state, first-call set-up
            for batch_size in batches:
                batch = workload.make_batch(batch_size)
                start = time.perf_counter()
                peak, growth = measured_step_memory(step, batch, suite.cuda)
                seconds = time.perf_counter() - start
                predicted_peak = memory.peak(batch_size)
                predicted_growth = predicted_peak - memory.live_before(batch_size)
                rows.append({"gradient_checkpointing": checkpointing, "batch_size": batch_size,
                             "predicted_peak": predicted_peak, "measured_peak": peak,
                             "peak_ratio": None if peak is None else predicted_peak / peak,
                             "predicted_growth": predicted_growth, "measured_growth": growth,
                             "growth_ratio": predicted_growth / growth, "step_s": seconds, "trace_s": trace_s})
                del batch
        del step, workload
        suite.release()
    worst = max(abs(row[key] - 1) for row in rows for key in ("peak_ratio", "growth_ratio") if row[key] is not None)
    return {"status": "ok", "size": size, "method": "himo", "precision": "bf16 mixed (accelerate's autocast)",
            "measured": "torch.cuda.max_memory_allocated" if suite.cuda else "live tensor bytes (CPU)",
            "rows": rows, "worst_relative_error": worst, "target": 0.10, "met": worst <= 0.10}


def memory_markdown(check: dict | None) -> list[str]:
    if not check:
        return []
    if check["status"] != "ok":
        return ["", f"Memory check: {check['status']}: {check.get('error', '')}"]
    lines = ["", f"Memory check: the planner against {check['measured']}, {check['method']} at {check['size']}, "
                 f"{check['precision']} (worst relative error {check['worst_relative_error']:.3f}, target "
                 f"{check['target']:g}: {'met' if check['met'] else '**missed**'}).", "",
             "| checkpointing | batch | predicted peak GiB | measured peak GiB | ratio | predicted growth GiB | "
             "measured growth GiB | ratio |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in check["rows"]:
        gib = 2**30
        peak = "-" if row["measured_peak"] is None else f"{row['measured_peak'] / gib:.3f}"
        ratio = "-" if row["peak_ratio"] is None else f"{row['peak_ratio']:.3f}"
        lines.append(f"| {'on' if row['gradient_checkpointing'] else 'off'} | {row['batch_size']} | "
                     f"{row['predicted_peak'] / gib:.3f} | {peak} | {ratio} | {row['predicted_growth'] / gib:.3f} | "
                     f"{row['measured_growth'] / gib:.3f} | {row['growth_ratio']:.3f} |")
    return lines


GPU_DEFAULTS = dict(warmup=3, steps=10, sync_steps=2, max_batch=512, compile_backend="inductor")
TINY_DEFAULTS = dict(warmup=0, steps=1, sync_steps=1, max_batch=4, compile_backend="eager", device="cpu")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/gpu_suite", help="directory of gpu_suite.json / gpu_suite.md")
    parser.add_argument("--configs", default=",".join(NAMES),
                        help=f"comma list of names ({', '.join(NAMES)}) or ids (name/eager, name/compile)")
    parser.add_argument("--modes", default="eager,compile", help="comma list of eager, compile")
    parser.add_argument("--time_budget_s", type=float, default=420.0,
                        help="seconds for the whole suite: configurations past it are skipped or stopped")
    parser.add_argument("--warmup", type=int, help="steps after the batch search, before timing (3; --tiny: 0)")
    parser.add_argument("--steps", type=int, help="timed steps, the median reported (10; --tiny: 1)")
    parser.add_argument("--sync_steps", type=int, help="profiled steps for the host-sync count (2; --tiny: 1)")
    parser.add_argument("--max_batch", type=int, help="first batch tried, a power of two (512; --tiny: 4)")
    parser.add_argument("--profile", nargs="?", const="onelip/eager", default=None, metavar="CONFIG",
                        help="also write a torch.profiler trace of 3 steps of this config id (default onelip/eager)")
    parser.add_argument("--compile_backend", help="torch.compile backend (inductor; --tiny: eager)")
    parser.add_argument("--compile_mode", default=None, help="torch.compile mode (default: None, the default mode)")
    parser.add_argument("--peak_tflops", type=float, default=None, help="dense bf16 peak, overriding the lookup")
    parser.add_argument("--device", help="cuda where available, else cpu (--tiny: cpu)")
    parser.add_argument("--no_memory_check", action="store_true",
                        help="skip the memory planner's check against the measured step (default: run it first)")
    parser.add_argument("--tiny", action="store_true",
                        help="widths 64, 2 layers, 64 px, on the CPU, batch 4, 1 timed step, compile backend 'eager' "
                             "(Dynamo's graph capture without Inductor's code generation): tests the script")
    args = parser.parse_args(argv)
    defaults = TINY_DEFAULTS if args.tiny else dict(GPU_DEFAULTS, device="cuda" if torch.cuda.is_available() else "cpu")
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    wanted = [item.strip() for item in args.configs.split(",") if item.strip()]
    if not modes or set(modes) - {"eager", "compile"}:
        parser.error(f"--modes takes a comma list of eager, compile; got {args.modes!r}")
    unknown = [item for item in wanted if item.split("/")[0] not in NAMES
               or item.count("/") > 1 or ("/" in item and item.split("/")[1] not in ("eager", "compile"))]
    if unknown or not wanted:
        parser.error(f"unknown configurations {unknown}: names are {', '.join(NAMES)}, ids name/eager, name/compile")
    orders = {"eager": NAMES, "compile": COMPILE_ORDER}
    args.plan = [f"{name}/{mode}" for mode in modes for name in orders[mode]
                 if name in wanted or f"{name}/{mode}" in wanted]
    if not args.plan:
        parser.error("--configs and --modes select no configuration")
    if args.profile and args.profile not in args.plan:
        parser.error(f"--profile {args.profile} is not among the configurations run: {args.plan}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    suite = Suite(args)
    print(f"device: {suite.device_name}; torch {torch.__version__}, CUDA {torch.version.cuda}, transformers "
          f"{transformers.__version__}; MFU against {suite.peak_label}"
          f"{'' if suite.peak_flops is None else f' = {suite.peak_flops / 1e12:g} TFLOP/s'}", flush=True)
    if STUBBED_MODULES:
        print(f"not installed, stubbed (only CAST's image processor imports them): {', '.join(STUBBED_MODULES)}",
              flush=True)
    print(f"{len(args.plan)} configurations, time budget {args.time_budget_s:g} s: {', '.join(args.plan)}", flush=True)
    if not args.no_memory_check:
        suite.run_memory_check()
    for config in args.plan:
        suite.run(config)
    print(f"\ndevice: {suite.device_name}\ntorch {torch.__version__}, CUDA {torch.version.cuda}, transformers "
          f"{transformers.__version__}, total {suite.elapsed():.0f} s\n")
    print(markdown(suite.results, suite.environment()) + "\n".join(memory_markdown(suite.memory_check)), flush=True)
    print(f"written: {suite.out / 'gpu_suite.json'}, {suite.out / 'gpu_suite.md'}", flush=True)


if __name__ == "__main__":
    main()
