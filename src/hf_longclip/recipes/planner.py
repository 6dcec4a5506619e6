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

`fits_table()` renders docs/training.md's "What fits where" tables from `docs/benchmarks/fits.json`;
`python -m hf_longclip.recipes.planner --write-table` traces every cell again and rewrites both (minutes on a CPU).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from hf_longclip.training.memory import (
    Sharding,
    StepMemory,
    StepOptions,
    StepWorkload,
    trace_step_memory,
    with_host_values,
)

GiB = 2**30
GPU_MEMORY_GB = (24, 40, 80, 141)
# a card sold as N GB shows about N GiB to PyTorch (A100-80GB 79.2, H100 79.6, H200 139.8, A100-40GB 39.4, RTX 4090
# 23.6); of that, RESERVED_GIB is outside PyTorch's tensors (CUDA context and kernels, cuBLAS and NCCL workspaces)
# and FRAGMENTATION of the rest is left to the caching allocator's rounding and fragmentation
RESERVED_GIB = 1.0
FRAGMENTATION = 0.10
LONG_LENGTH, SHORT_LENGTH = 248, 77  # Long-CLIP's text positions, CLIP's
SUB_CAPTIONS = 8  # FLAIR / F-CAST: sub-captions of 77 tokens per image
CAPTIONS_PER_IMAGE = 2  # DITM: MultiCaptionCollator's default
BOS, EOS = 49406, 49407


@dataclass(frozen=True)
class ModelSize:
    """A CLIP's tower sizes (transformers' names): vision (width, layers, heads, MLP width, image and patch size),
    text (width, layers, heads, MLP width), the shared projection, the vocabulary and the activation."""

    vision_width: int
    vision_layers: int
    vision_heads: int
    vision_intermediate: int
    image_size: int
    patch_size: int
    text_width: int
    text_layers: int
    text_heads: int
    text_intermediate: int
    projection_dim: int
    vocab_size: int = 49408
    hidden_act: str = "quick_gelu"
    cast: tuple | None = None  # CAST's (depths, clusters) at this width, where it is defined (F-CAST)


SIZES = {
    "ViT-B/16": ModelSize(768, 12, 12, 3072, 224, 16, 512, 12, 8, 2048, 512, cast=((3, 3, 3, 2), (64, 32, 16))),
    "ViT-L/14": ModelSize(1024, 24, 16, 4096, 224, 14, 768, 12, 12, 3072, 768),
    "ViT-L/14-336": ModelSize(1024, 24, 16, 4096, 336, 14, 768, 12, 12, 3072, 768),
    # OpenCLIP ViT-bigG-14 (laion2b_s39b_b160k): SDXL's second text encoder is its text tower
    "ViT-bigG-14": ModelSize(1664, 48, 16, 8192, 224, 14, 1280, 32, 20, 5120, 1280, hidden_act="gelu"),
    # the tests' size: the same code at widths of 32
    "tiny": ModelSize(32, 2, 4, 64, 32, 8, 32, 2, 4, 64, 16, vocab_size=1000, cast=((1, 1), (8,))),
}

METHODS = {
    "himo": "HiMo-CLIP: MoLo with HiDe over the gathered batch (HiMoCLIPTask, the paper's recipe), 248 tokens",
    "longclip": "Long-CLIP's fine-tuning (LongCLIPTask): long captions (248 tokens) and their first sentences "
                f"({SHORT_LENGTH} tokens at most), PCA of the image features",
    "onelip": "OneLIP (OneLIPTask): Eq. 10 with TRIM, a frozen 77-token text teacher of the same size, PO-HNM's "
              "queued hard negatives, 248 tokens",
    "ditm": f"DITM (DITMTask): adaptive triplet + ordering, {CAPTIONS_PER_IMAGE} captions of 248 tokens per image",
    "flair": f"FLAIR (FCASTTask, objective flair): ViT, flat text encoder, {SUB_CAPTIONS} sub-captions of 77 tokens "
             "per image",
    "fcast": f"F-CAST (FCASTTask): CAST backbone, hierarchical text encoder over 4 chunks, {SUB_CAPTIONS} "
             "sub-captions of 77 tokens per image, two-level loss",
}
METHOD_ALIASES = {"molo": "himo"}


@dataclass(frozen=True)
class PlanSettings:
    """What to plan: `size` (a `SIZES` name), `method` (a `METHODS` name), `precision` ("bf16": mixed, or "fp32"),
    `gradient_checkpointing`, `zero_stage` (0, 2 or 3; 0 with several processes is DDP) over `processes`, gradient
    caching's `chunk` (0: off), `lora_r` (LoRA's rank on the attention projections; 0: full fine-tuning), `lock`
    ("image" or "text": that tower frozen, open_clip's --lock-image / --lock-text; "none"), OneLIP's
    `hard_negatives` (M queued per sample; 0: none) and `bank_captions` (the captions whose base embeddings sit on
    the GPU for the queues' gather; ShareGPT4V's 1.2M), `target` ("gpu": AdamW's multi-tensor kernels, memory set
    aside per card; "cpu": PyTorch's CPU defaults, nothing set aside) and the traced `batch_sizes` (default: 8, 16,
    24; with gradient caching 2, 3 and 4 chunks)."""

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
        method = METHOD_ALIASES.get(self.method, self.method)
        object.__setattr__(self, "method", method)
        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; choose among {', '.join(SIZES)}")
        if method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose among {', '.join(METHODS)}")
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
        if method == "fcast" and SIZES[self.size].cast is None:
            raise ValueError(f"F-CAST's CAST backbone is defined at {', '.join(n for n, s in SIZES.items() if s.cast)}"
                             f" (CAST-B at ViT-B/16), not at {self.size}: plan flair there")

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
        if self.method == "onelip":
            parts.append(f"{self.hard_negatives} hard negatives per sample" if self.hard_negatives
                         else "no hard negatives")
        return ", ".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# The workloads: each method's model and task, as its script builds them, at a size


def _text_config(size: ModelSize, positions: int, layers: int | None = None) -> dict:
    return dict(hidden_size=size.text_width, intermediate_size=size.text_intermediate,
                num_attention_heads=size.text_heads, num_hidden_layers=layers or size.text_layers,
                vocab_size=size.vocab_size, max_position_embeddings=positions, hidden_act=size.hidden_act,
                bos_token_id=BOS % size.vocab_size, eos_token_id=EOS % size.vocab_size,
                pad_token_id=EOS % size.vocab_size)


def _vision_config(size: ModelSize) -> dict:
    return dict(hidden_size=size.vision_width, intermediate_size=size.vision_intermediate,
                num_attention_heads=size.vision_heads, num_hidden_layers=size.vision_layers,
                image_size=size.image_size, patch_size=size.patch_size, hidden_act=size.hidden_act)


class _Batches:
    """Batches of the shapes a method's collator gives (contents do not matter on fake tensors)."""

    def __init__(self, size: ModelSize, settings: PlanSettings):
        self.size = size
        # DeepSpeed's bf16 runs the model in bf16 without autocast: pixels are given in bf16 (CAST's patch embedding,
        # unlike CLIP's, does not cast them to its weights' dtype)
        self.pixel_dtype = torch.bfloat16 if settings.deepspeed and settings.precision == "bf16" else torch.float32

    def texts(self, rows: int, length: int) -> dict:
        """Token ids padded to the longest text, as the processors pad: the first text `length` tokens long, the
        others one shorter (real batches hold padding, so the text towers build their attention masks)."""
        eos = EOS % self.size.vocab_size  # where the text towers pool
        ids, mask = torch.zeros(rows, length, dtype=torch.long), torch.ones(rows, length, dtype=torch.long)
        ids[:1, -1] = eos
        ids[1:, -2:] = eos
        mask[1:, -1] = 0
        return {"input_ids": ids, "attention_mask": mask}

    def images(self, rows: int) -> torch.Tensor:
        return torch.zeros(rows, 3, self.size.image_size, self.size.image_size, dtype=self.pixel_dtype)


class _QueuedNegatives:
    """PO-HNM's queues as the GPU holds them (`hf_longclip.recipes.onelip.hard_negatives.HardNegativeQueues`): the
    bank's caption embeddings (captions x projection, float16) on the device, each batch's M queued negatives
    gathered from it by index; the refresh's host work (faiss, the queue file) is no GPU memory."""

    def __init__(self, captions: int, queue_size: int, dim: int):
        self.bank = torch.zeros(captions, dim, dtype=torch.float16)
        self.queue_size = queue_size

    def negatives(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.zeros(rows.shape[0], self.queue_size, dtype=torch.long)
        filled = indices >= 0
        return self.bank[indices].masked_fill_(~filled[..., None], 0), filled

    def refresh(self, rows, image_embeds, text_embeds, negative_embeds, step) -> dict:
        return {}


def _himo(settings: PlanSettings, size: ModelSize, longclip: bool = False) -> StepWorkload:
    from hf_longclip.models.himo_clip.configuration_himo_clip import HiMoCLIPConfig
    from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
    from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
    from hf_longclip.recipes.longclip import SHORT_PREFIX, LongCLIPTask

    # as converted from Long-CLIP's release (rows 0-19 kept)
    model = HiMoCLIPModel(HiMoCLIPConfig(text_config=_text_config(size, LONG_LENGTH),
                                         vision_config=_vision_config(size), projection_dim=size.projection_dim,
                                         frozen_position_rows=20))
    model = _adapted(model, settings)
    data = _Batches(size, settings)

    def make_batch(rows: int) -> dict:
        batch = {**data.texts(rows, LONG_LENGTH), "pixel_values": data.images(rows)}
        if longclip:
            batch.update({SHORT_PREFIX + key: value for key, value in data.texts(rows, SHORT_LENGTH).items()})
        return batch

    task = LongCLIPTask(model, None) if longclip else HiMoCLIPTask(model, None)
    return StepWorkload(model, task, make_batch)


def _onelip(settings: PlanSettings, size: ModelSize) -> StepWorkload:
    from transformers import CLIPTextConfig, CLIPTextModel

    from hf_longclip.models.onelip.configuration_onelip import OneLIPConfig
    from hf_longclip.models.onelip.modeling_onelip import OneLIPForPreTraining
    from hf_longclip.recipes.onelip.task import OneLIPTask

    model = OneLIPForPreTraining(OneLIPConfig(text_config=dict(_text_config(size, LONG_LENGTH),
                                                               base_length=SHORT_LENGTH),
                                              vision_config=_vision_config(size), projection_dim=size.projection_dim))
    model = _adapted(model, settings)
    teacher = CLIPTextModel(CLIPTextConfig(**_text_config(size, SHORT_LENGTH)))
    queues = (_QueuedNegatives(settings.bank_captions, settings.hard_negatives, size.projection_dim)
              if settings.hard_negatives else None)
    # the GPU's decomposition (the CPU's exact one is `auto` on a CPU)
    task = OneLIPTask(model, None, teacher=teacher, hard_negatives=queues,
                      trim_decomposition="subspace" if settings.target == "gpu" else "auto")
    del teacher  # the task holds its own copy
    data = _Batches(size, settings)

    def make_batch(rows: int) -> dict:
        batch = {**data.texts(rows, LONG_LENGTH), "pixel_values": data.images(rows)}
        if queues is not None:
            batch["sample_index"] = torch.arange(rows)
        return batch

    def extra() -> list:  # after the first step, which placed the teacher in the model's dtype
        return [list(task.teacher.parameters()), list(task.teacher.buffers())] + ([queues.bank] if queues else [])

    return StepWorkload(model, task, make_batch, extra)


def _ditm(settings: PlanSettings, size: ModelSize) -> StepWorkload:
    from hf_longclip.models.ditm.configuration_ditm import DITMConfig
    from hf_longclip.models.ditm.modeling_ditm import DITMModel
    from hf_longclip.recipes.ditm.task import DITMTask

    model = DITMModel(DITMConfig(text_config=_text_config(size, LONG_LENGTH), vision_config=_vision_config(size),
                                 projection_dim=size.projection_dim))
    model = _adapted(model, settings)
    data = _Batches(size, settings)

    def make_batch(rows: int) -> dict:  # MultiCaptionCollator's: each image once, its captions after it
        texts = rows * CAPTIONS_PER_IMAGE
        owners = with_host_values(torch.arange(rows).repeat_interleave(CAPTIONS_PER_IMAGE),  # split_batch reads it
                                  [row // CAPTIONS_PER_IMAGE for row in range(texts)])
        return {**data.texts(texts, LONG_LENGTH), "pixel_values": data.images(rows), "text_image_index": owners,
                "image_ids": owners.clone(), "descriptiveness": torch.zeros(texts)}

    return StepWorkload(model, DITMTask(model, None), make_batch)


def _fcast(settings: PlanSettings, size: ModelSize, objective: str) -> StepWorkload:
    from hf_longclip.models.fcast.configuration_fcast import FCASTConfig
    from hf_longclip.models.fcast.modeling_fcast import FCASTModel
    from hf_longclip.recipes.fcast.task import FCASTTask

    if objective == "fcast":  # as benchmarks/gpu_suite.py and examples/train_fcast.py build F-CAST
        stage1 = 2 * size.text_layers // 3
        text = dict(_text_config(size, SHORT_LENGTH, stage1), num_stage2_layers=size.text_layers - stage1,
                    num_chunks=4)
        depths, clusters = size.cast
        vision = dict(hidden_size=size.vision_width, intermediate_size=size.vision_intermediate,
                      num_attention_heads=size.vision_heads, image_size=size.image_size,
                      num_segments=(size.image_size // size.patch_size) ** 2, depths=list(depths),
                      num_clusters=list(clusters))
        backbone = "cast"
    else:
        text = dict(_text_config(size, SHORT_LENGTH), num_stage2_layers=0, num_chunks=1)
        vision, backbone = _vision_config(size), "vit"
    model = FCASTModel(FCASTConfig(text_config=text, vision_config=vision, vision_backbone=backbone,
                                   projection_dim=size.projection_dim, pool_heads=size.text_heads))
    model = _adapted(model, settings)
    data = _Batches(size, settings)

    def make_batch(rows: int) -> dict:
        texts = data.texts(rows * SUB_CAPTIONS, SHORT_LENGTH)
        batch = {key: value.view(rows, SUB_CAPTIONS, SHORT_LENGTH) for key, value in texts.items()}
        batch["pixel_values"] = data.images(rows)
        if backbone == "cast":  # CASTImageProcessor's label maps: here a grid of patch-sized squares
            cells = torch.arange(size.image_size) // size.patch_size
            grid = cells[:, None] * (size.image_size // size.patch_size) + cells[None]
            batch["superpixels"] = grid.expand(rows, -1, -1).contiguous()
        return batch

    return StepWorkload(model, FCASTTask(model, None, objective=objective), make_batch)


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


BUILDERS = {
    "himo": lambda settings, size: _himo(settings, size),
    "longclip": lambda settings, size: _himo(settings, size, longclip=True),
    "onelip": _onelip,
    "ditm": _ditm,
    "flair": lambda settings, size: _fcast(settings, size, "flair"),
    "fcast": lambda settings, size: _fcast(settings, size, "fcast"),
}


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
    if settings.method == "onelip" and settings.hard_negatives:
        lines.append(f"PO-HNM: the bank's {settings.bank_captions:,} caption embeddings on the GPU (float16), each "
                     f"sample's {settings.hard_negatives} queued negatives gathered from it; the queues themselves "
                     "stay on disk")
    if settings.method == "longclip":
        lines.append(f"Long-CLIP's first sentences padded to {SHORT_LENGTH} tokens (the collator pads to the longest)")
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
    if memory is None:
        size = SIZES[settings.size]
        memory = trace_step_memory(lambda: BUILDERS[settings.method](settings, size), settings.step_options(),
                                   settings.traced_batch_sizes)
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
        largest_batch=largest, peak_at=peak_at, assumptions=assumptions(settings),
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
             + ("   (frozen teacher" + (", PO-HNM bank" if s.hard_negatives else "") + ")"
                if s.method == "onelip" else ""),
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


# ---------------------------------------------------------------------------------------------------------------
# docs/training.md's table

TABLE_FILE = Path(__file__).resolve().parents[3] / "docs" / "benchmarks" / "fits.json"
TABLE_SIZES = ("ViT-B/16", "ViT-L/14")
TABLE_METHODS = ("himo", "longclip", "onelip", "ditm", "flair", "fcast")
TABLE_SETTINGS = {  # column label -> settings of the table's common setups: bf16 mixed over 8 GPUs
    "DDP x 8": dict(precision="bf16", processes=8),
    "DDP x 8 + ckpt": dict(precision="bf16", processes=8, gradient_checkpointing=True),
    "ZeRO-2 x 8": dict(precision="bf16", zero_stage=2, processes=8),
    "ZeRO-2 x 8 + ckpt": dict(precision="bf16", zero_stage=2, processes=8, gradient_checkpointing=True),
}
TABLE_CARDS = (24, 40, 80)
PAPER_BATCH = 128  # HiMo-CLIP's and Long-CLIP's 1,024 over 8 GPUs


def card_needed(peak: float) -> float:
    """The card size (GB, as sold) whose usable memory (`usable_bytes`) holds a step peaking at `peak` bytes."""
    return peak / GiB / (1 - FRAGMENTATION) + RESERVED_GIB


def table_plans(sizes=TABLE_SIZES, methods=TABLE_METHODS, columns=TABLE_SETTINGS, progress=None) -> dict:
    """The table's figures: for each method, size and column, the largest batch per process on each of
    TABLE_CARDS and the card a batch of PAPER_BATCH per process needs (GB), tracing each distinct step once (the
    ZeRO columns share one trace: 8 processes' gather, DeepSpeed's bf16). JSON-ready."""
    rows = {}
    for size in sizes:
        for method in methods:
            if method == "fcast" and SIZES[size].cast is None:
                continue
            traces = {}
            for label, options in columns.items():
                settings = PlanSettings(size=size, method=method, **options)
                key = (settings.gradient_checkpointing, settings.processes, settings.deepspeed)
                if key not in traces:
                    traces[key] = trace_step_memory(lambda s=settings: BUILDERS[s.method](s, SIZES[s.size]),
                                                    settings.step_options(), settings.traced_batch_sizes)
                plan = plan_memory(settings, TABLE_CARDS, traces[key])
                rows.setdefault(f"{method} {size}", {})[label] = {
                    "largest_batch": {str(gb): batch for gb, batch in plan.largest_batch.items()},
                    f"card_for_{PAPER_BATCH}_gb": round(card_needed(plan.peak_at[PAPER_BATCH]), 1)}
                if progress:
                    progress(f"{method} {size} {label}: {plan.largest_batch}, {PAPER_BATCH} per process needs "
                             f"{card_needed(plan.peak_at[PAPER_BATCH]):.1f} GB")
    return rows


def fits_table(figures: dict | None = None) -> str:
    """docs/training.md's two "What fits where" tables (markdown) from `figures` (default: TABLE_FILE's): the
    largest batch per GPU on each of TABLE_CARDS, and the card a batch of PAPER_BATCH per GPU needs."""
    figures = figures if figures is not None else json.loads(TABLE_FILE.read_text())["rows"]
    columns = list(TABLE_SETTINGS)
    cards = " / ".join(str(gb) for gb in TABLE_CARDS)
    lines = [f"Largest batch per GPU on a {cards} GB card:", "",
             "| method | size | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for key, row in figures.items():
        method, size = key.split(" ", 1)
        cells = [" / ".join(str(row[label]["largest_batch"][str(gb)]) for gb in TABLE_CARDS) for label in columns]
        lines.append(f"| {method} | {size} | " + " | ".join(cells) + " |")
    lines += ["", f"GPU memory a batch of {PAPER_BATCH} per GPU needs (the papers' 1,024 over 8 GPUs; in bold where "
                  f"a {TABLE_CARDS[0]} GB card holds it):", "",
              "| method | size | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for key, row in figures.items():
        method, size = key.split(" ", 1)
        cells = []
        for label in columns:
            needed = row[label][f"card_for_{PAPER_BATCH}_gb"]
            cells.append(f"**{needed:g} GB**" if needed <= TABLE_CARDS[0] else f"{needed:g} GB")
        lines.append(f"| {method} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TRAINING_DOC = TABLE_FILE.parents[1] / "training.md"
TABLE_START = "<!-- fits-table: generated by `python -m hf_longclip.recipes.planner --write-table` -->"
TABLE_END = "<!-- /fits-table -->"


def write_table(path: Path = TABLE_FILE, progress=print) -> dict:
    """Trace every cell of the table and write it to `path`, with the command, date, machine and versions."""
    from hf_longclip.training.provenance import provenance

    start = time.perf_counter()
    rows = table_plans(progress=progress)
    data = {**provenance(seconds=round(time.perf_counter() - start)),
            "command": "python -m hf_longclip.recipes.planner --write-table",
            "cards_gb": list(TABLE_CARDS), "columns": {label: options for label, options in TABLE_SETTINGS.items()},
            "usable_gib": {str(gb): round(usable_bytes(gb) / GiB, 2) for gb in TABLE_CARDS},
            "assumptions": assumptions(PlanSettings(zero_stage=2, processes=8)), "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def update_docs(doc: Path = TRAINING_DOC, figures: dict | None = None) -> None:
    """Put `fits_table(figures)` between the table's markers in docs/training.md."""
    text = doc.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{doc} has no {TABLE_START} ... {TABLE_END} markers")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    doc.write_text(f"{head}{TABLE_START}\n{fits_table(figures)}\n{TABLE_END}{tail}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="regenerate docs/training.md's \"What fits where\" tables: trace "
                                                 "every cell into docs/benchmarks/fits.json (minutes on a CPU) and "
                                                 "render them into the page")
    parser.add_argument("--write-table", action="store_true", help="trace every cell, write the JSON and the page")
    parser.add_argument("--update-docs", action="store_true", help="render the page's tables from the JSON only")
    args = parser.parse_args(argv)
    if args.write_table:
        write_table()
    if args.write_table or args.update_docs:
        update_docs()
    print(fits_table())


__all__ = ["GPU_MEMORY_GB", "METHODS", "SIZES", "MemoryPlan", "ModelSize", "PlanSettings", "assumptions",
           "card_needed", "fits_table", "format_plan", "plan_memory", "table_plans", "update_docs", "usable_bytes",
           "write_table"]

if __name__ == "__main__":
    main()
