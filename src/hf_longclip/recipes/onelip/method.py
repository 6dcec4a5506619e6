"""OneLIP as the registry knows it (`hf_longclip.recipes.registry`): one stage (TRIM distillation from a frozen
77-token teacher, Eq. 10), PO-HNM's queued hard negatives where asked; and the variants examples/train_onelip.py
compares it with (Table 1 / Table 4's rows, Fig. 3's lengths, TULIP's two stages), each built from a base CLIP by
`build_variant` and trained in the groups `variant_groups` gives."""

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from datasets import DatasetDict
from transformers import AutoConfig, CLIPTextConfig, CLIPTextModel

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.evaluation.long_captions import evaluate_text_lengths
from hf_longclip.miniature.bases import evaluate_base
from hf_longclip.models.himo_clip.modeling_himo_clip import HiMoCLIPModel
from hf_longclip.models.himo_clip.processing_himo_clip import HiMoCLIPProcessor
from hf_longclip.models.onelip.configuration_onelip import OneLIPConfig
from hf_longclip.models.onelip.modeling_onelip import OneLIPForPreTraining, OneLIPModel
from hf_longclip.models.onelip.processing_onelip import OneLIPProcessor
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.recipes.longclip import FirstSentenceCollator, LongCLIPTask
from hf_longclip.recipes.onelip.card import CARD
from hf_longclip.recipes.onelip.hard_negatives import HardNegativeQueues
from hf_longclip.recipes.onelip.negative_bank import NegativeBank, default_bank_directory, model_digest
from hf_longclip.recipes.onelip.task import OneLIPTask
from hf_longclip.recipes.onelip.tulip import distillation_stage, finetuning_stage, set_rope_scaling
from hf_longclip.recipes.registry import LONG_LENGTH, SHORT_LENGTH, Method
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import whole_model_init
from hf_longclip.training.runs import load_clip

SCRIPT = "examples/train_onelip.py"
BASE_LENGTH = SHORT_LENGTH  # the base CLIP's text positions
BASE, ONELIP_BASE = "clip-77", "base"  # the start's row: a CLIP-77, or a OneLIP checkpoint (e.g. converted TULIP)
# name: the options train_onelip.py builds each variant with. One-stage rows: `objective` ("clip": Long-CLIP
# stretching + global InfoNCE; "longclip": Long-CLIP's recipe; "pooled" / "trim": OneLIP without / with TRIM, Table 4)
# at a maximum training `length` (77 and 128: Fig. 3). TULIP's two `stage`s (`hf_longclip.recipes.onelip.tulip`).
# Table 4's rows: OneLIP (TRIM) on `--table4_train` scenes with `queue_fraction` of M hard negatives per sample (0:
# none), re-scored by Eq. 9 (`online`, PO-HNM) or mined once by the base (offline HNM).
VARIANTS = {
    "clip-248": dict(objective="clip", length=248),
    "longclip": dict(objective="longclip", length=248),
    "onelip-pooled": dict(objective="pooled", length=248),
    "onelip": dict(objective="trim", length=248),
    "clip-77-ft": dict(objective="clip", length=77),
    "clip-128": dict(objective="clip", length=128),
    "onelip-77": dict(objective="trim", length=77),
    "onelip-128": dict(objective="trim", length=128),
    "tulip-distill": dict(stage="distill"),
    "tulip": dict(stage="finetune"),
    "table4-trim": dict(objective="trim", length=248, queue_fraction=0.0, online=False),
    "table4-hnm": dict(objective="trim", length=248, queue_fraction=1.0, online=False),
    "table4-pohnm-half": dict(objective="trim", length=248, queue_fraction=0.5, online=True),
    "table4-pohnm": dict(objective="trim", length=248, queue_fraction=1.0, online=True),
}
ONE_STAGE = tuple(name for name, options in VARIANTS.items() if "stage" not in options and "queue_fraction" not in
                  options)
TULIP_STAGES = tuple(name for name, options in VARIANTS.items() if "stage" in options)
TABLE4 = tuple(name for name, options in VARIANTS.items() if "queue_fraction" in options)
CHOICES = (*ONE_STAGE, "tulip", *TABLE4)  # what --variants names: "tulip" is both of TULIP's stages
ONELIP_OBJECTIVES = ("pooled", "trim")  # the others adapt a CLIPModel (HiMoCLIPModel.from_clip)


class QueuedNegativesStandIn:
    """PO-HNM's queues as the device holds them (`HardNegativeQueues`, without faiss or the on-disk queues): the
    bank's caption embeddings (captions x projection, float16) on the device, each batch's M queued negatives
    gathered from it by index, every slot filled; `refresh` (host work: faiss, the queue file) does nothing."""

    def __init__(self, bank: torch.Tensor, queue_size: int):
        self.bank, self.queue_size = bank.half(), queue_size

    def negatives(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.zeros(rows.shape[0], self.queue_size, dtype=torch.long, device=self.bank.device)
        filled = indices >= 0
        return self.bank[indices].masked_fill_(~filled[..., None], 0), filled

    def refresh(self, rows, image_embeds, text_embeds, negative_embeds, step) -> dict:
        return {}


def _onelip(size, options):
    model = OneLIPForPreTraining(OneLIPConfig(text_config=dict(size.text_config(LONG_LENGTH), base_length=SHORT_LENGTH),
                                              vision_config=size.vision_config(), projection_dim=size.projection_dim))
    teacher = CLIPTextModel(CLIPTextConfig(**size.text_config(SHORT_LENGTH)))
    queues = None
    if options.hard_negatives:
        bank = torch.zeros(options.bank_captions, size.projection_dim, dtype=torch.float16)
        queues = QueuedNegativesStandIn(bank, options.hard_negatives)
    # the GPU's decomposition (the CPU's exact one is `auto` on a CPU)
    task = OneLIPTask(model, None, teacher=teacher, hard_negatives=queues,
                      trim_decomposition="subspace" if options.target == "gpu" else "auto")
    return model, task


def _batch(size, rows, inputs, options) -> dict:
    batch = {**inputs.texts(rows, LONG_LENGTH), "pixel_values": inputs.images(rows)}
    if options.hard_negatives:
        batch["sample_index"] = torch.arange(rows, device=batch["pixel_values"].device)
    return batch


def _held_outside(task) -> dict:
    held = {"frozen teacher": [list(task.teacher.parameters()), list(task.teacher.buffers())]}
    if task.hard_negatives is not None:
        held["PO-HNM bank"] = [task.hard_negatives.bank]
    return held


def _plan_notes(options) -> list[str]:
    if not options.hard_negatives:
        return []
    return [f"PO-HNM: the bank's {options.bank_captions:,} caption embeddings on the GPU (float16), each sample's "
            f"{options.hard_negatives} queued negatives gathered from it; the queues themselves stay on disk"]


def optimizer_steps(loop_args: LoopArguments, num_samples: int, num_processes: int) -> int:
    """How many optimizer steps the loop will take (its `max_steps`, else its epochs of full global batches)."""
    if loop_args.max_steps > 0:
        return loop_args.max_steps
    batches = num_samples // (loop_args.process_batch_size * num_processes)
    return math.ceil(loop_args.num_train_epochs * math.ceil(batches / loop_args.gradient_accumulation_steps))


def is_onelip_checkpoint(path: str, trust_remote_code: bool = False) -> bool:
    """Whether `path` holds a OneLIP checkpoint (e.g. converted TULIP weights, `hf-longclip convert tulip`) rather
    than a CLIP."""
    return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code).model_type == OneLIPConfig.model_type


def check_onelip_start(start: str, variants: list[str], teacher: str | None) -> None:
    """Exit unless every one of `variants` can start from the OneLIP checkpoint `start` (only the OneLIP rows) with
    the CLIP `teacher` as OneLIP's teacher."""
    refused = [v for v in variants if v not in ONE_STAGE or VARIANTS[v]["objective"] not in ONELIP_OBJECTIVES]
    if refused:
        raise SystemExit(f"--base_checkpoint {start} holds a OneLIP checkpoint: only the OneLIP rows "
                         f"{[v for v in ONE_STAGE if VARIANTS[v]['objective'] in ONELIP_OBJECTIVES]} start from it, "
                         f"not {refused} (they need a 77-token CLIPModel)")
    if not teacher:
        raise SystemExit(f"--base_checkpoint {start} holds a OneLIP checkpoint: name the CLIP whose text encoder is "
                         f"OneLIP's teacher with --teacher_checkpoint (for TULIP weights, the CLIP TULIP started from)")


def evaluate_start(accelerator: Accelerator, start: str, processor: tuple, onelip_start: bool,
                   evaluate: Callable[[torch.nn.Module, object], dict], trust_remote_code: bool = False) -> dict:
    """{row: results} of the start evaluated as it is, on the main process ({} elsewhere): a OneLIP checkpoint
    (`ONELIP_BASE`) at its own length, or the base CLIP (`BASE`) at 77 tokens; `processor`: its (tokenizer, image
    processor)."""
    if not accelerator.is_main_process:
        return {}
    if not onelip_start:
        return {BASE: evaluate_base(accelerator, start, processor, BASE_LENGTH, evaluate, trust_remote_code)}
    with whole_model_init(accelerator):
        model = OneLIPModel.from_pretrained(start, dtype=torch.float32, trust_remote_code=trust_remote_code)
    own = OneLIPProcessor(image_processor=processor[1], tokenizer=processor[0],
                          max_length=model.config.text_config.max_position_embeddings)
    return {ONELIP_BASE: evaluate(model.to(accelerator.device), own)}


def build_variant(variant: str, start: str, processor: tuple, *, settings, seed: int, weight_switch_step: int = 0,
                  onelip_start: bool = False, bank: NegativeBank | None = None, output_dir: str = "",
                  trust_remote_code: bool = False):
    """(task, processor) of `variant` (`VARIANTS`) adapted from the base CLIP at `start` (its own code runs only with
    `trust_remote_code`), `processor` its (tokenizer, image processor), every new weight initialised under `seed`.
    `settings`: train_onelip.py's arguments (TRIM's `trim_top_k`, `trim_rank`, `trim_alpha`, PO-HNM's `hnm_*`,
    `tulip_distill_loss`, `teacher_checkpoint`). OneLIP's loss weights switch at `weight_switch_step`; Table 4's rows
    queue hard negatives from `bank`, their live queues under `output_dir`/hard_negatives/; TULIP's second stage
    starts from the first's checkpoint under `output_dir`. With `onelip_start` (a OneLIP checkpoint, e.g. converted
    TULIP weights) the model starts from its weights, T_g set to the variant's length, its RoPE scaling kept, and the
    teacher is the text encoder of the CLIP `settings.teacher_checkpoint`."""
    options = VARIANTS[variant]
    tokenizer, image_processor = processor
    set_seed(seed)  # identical initialisation of every new weight (TRIM-Refine's queries) for every variant
    if "stage" in options:  # TULIP
        clip = load_clip(start, trust_remote_code)
        if variant == TULIP_STAGES[0]:
            return distillation_stage(clip, tokenizer, image_processor, loss_type=settings.tulip_distill_loss)
        distilled = OneLIPModel.from_pretrained(Path(output_dir) / TULIP_STAGES[0], dtype=torch.float32)
        return finetuning_stage(distilled, clip, tokenizer, image_processor)
    objective, length = options["objective"], options["length"]
    if onelip_start:
        model = OneLIPForPreTraining.from_pretrained(start, dtype=torch.float32, trust_remote_code=trust_remote_code)
        set_rope_scaling(model.onelip, model.config.text_config.rope_ntk_scaling, max_length=length)
        teacher = load_clip(settings.teacher_checkpoint, trust_remote_code)
    else:
        teacher = clip = load_clip(start, trust_remote_code)
        if objective in ("clip", "longclip"):
            model = HiMoCLIPModel.from_clip(clip, stretch_positions=length > BASE_LENGTH)
            processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=length)
            if objective == "longclip":
                return LongCLIPTask(model, FirstSentenceCollator(processor)), processor
            return HiMoCLIPTask(model, ImageTextCollator(processor), molo_lambda=0.0), processor
        model = OneLIPForPreTraining.from_clip(clip, max_length=length)
    processor = OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=length)
    trim = dict(token_distillation=objective, trim_top_k=settings.trim_top_k, trim_rank=settings.trim_rank,
                trim_alpha=settings.trim_alpha, weight_switch_step=weight_switch_step)
    if not options.get("queue_fraction"):
        return OneLIPTask(model, ImageTextCollator(processor), teacher=teacher, **trim), processor
    queues = HardNegativeQueues(bank, Path(output_dir) / "hard_negatives" / variant,
                                queue_size=max(1, round(options["queue_fraction"] * settings.hnm_queue_size)),
                                update_steps=settings.hnm_update_steps, beta=settings.hnm_beta,
                                theta=settings.hnm_theta, delta=settings.hnm_delta, online=options["online"])
    collate = ImageTextCollator(processor, index_column="sample_index")
    return OneLIPTask(model, collate, teacher=teacher, hard_negatives=queues, **trim), processor


def variant_groups(accelerator: Accelerator, variants: list[str], dataset, loop_args: LoopArguments, settings,
                   start: str, processor: tuple, bank_root: Path,
                   trust_remote_code: bool = False) -> Iterator[tuple[list[str], object, LoopArguments, dict]]:
    """train_onelip.py's `variants` in the order it trains them, as (variants, data, loop arguments, `build_variant`
    options) groups, each trained together, made when reached:
    - the one-stage rows on `dataset`, in as many optimizer steps as `loop_args` takes, the loss weights switching
      after `settings.weight_switch_fraction` of them;
    - TULIP's stages in as many steps, each a run of its own (logged, checkpointed, resumed): `tulip-distill` for
      `settings.tulip_distill_steps` (half by default), then `tulip` for the rest, both with TULIP's AdamW epsilon and
      gradient clipping (`settings.tulip_adam_epsilon`, `settings.tulip_max_grad_norm`);
    - Table 4's rows: `settings.table4_epochs` passes over the first `settings.table4_train` training scenes (their
      dataset indices in a `sample_index` column, PO-HNM's queue rows), the negative bank of the base at `start`
      built or reused first (`settings.negative_bank`, else under `bank_root`)."""
    total = optimizer_steps(loop_args, len(dataset["train"]), accelerator.num_processes)
    if chosen := [variant for variant in variants if variant in ONE_STAGE]:
        yield chosen, dataset, loop_args, dict(weight_switch_step=round(settings.weight_switch_fraction * total))
    if "tulip" in variants:
        distill_steps = settings.tulip_distill_steps if settings.tulip_distill_steps >= 0 else total // 2
        if not 0 < distill_steps < total:
            raise SystemExit(f"--tulip_distill_steps must leave both stages at least one of the {total} optimizer "
                             f"steps, got {distill_steps}")
        stage_args = replace(loop_args, adam_epsilon=settings.tulip_adam_epsilon,
                             max_grad_norm=settings.tulip_max_grad_norm)
        for stage, steps in zip(TULIP_STAGES, (distill_steps, total - distill_steps)):
            yield [stage], dataset, replace(stage_args, max_steps=steps), dict(output_dir=loop_args.output_dir)
    if not (chosen := [variant for variant in variants if variant in TABLE4]):
        return
    count = min(settings.table4_train, len(dataset["train"]))
    train = dataset["train"].select(range(count))
    data = DatasetDict(train=train.add_column("sample_index", np.arange(count)), validation=dataset["validation"])
    table4_args = replace(loop_args, max_steps=-1, num_train_epochs=settings.table4_epochs)
    steps = optimizer_steps(table4_args, count, accelerator.num_processes)
    switch_step = round(settings.weight_switch_fraction * steps)
    bank = None
    if any(VARIANTS[variant]["queue_fraction"] for variant in chosen):
        with whole_model_init(accelerator):
            base_clip = load_clip(start, trust_remote_code)
        digest = model_digest(base_clip)
        directory = settings.negative_bank or default_bank_directory(bank_root, data["train"], digest)
        base_processor = HiMoCLIPProcessor(image_processor=processor[1], tokenizer=processor[0],
                                           max_length=BASE_LENGTH)
        bank = NegativeBank.build_or_load(directory, data["train"], base_clip, base_processor, accelerator,
                                          batch_size=loop_args.per_device_eval_batch_size, base_digest=digest)
    yield chosen, data, table4_args, dict(weight_switch_step=switch_step, bank=bank, output_dir=loop_args.output_dir)


METHODS = (
    Method("onelip", "OneLIP (OneLIPTask): Eq. 10 with TRIM, a frozen 77-token text teacher of the same size, PO-HNM's "
                     "queued hard negatives, 248 tokens",
           _onelip, _batch, held_outside=_held_outside,
           plan_notes=_plan_notes, script=SCRIPT, variants=VARIANTS, build_variant=build_variant, card=CARD,
           evaluate=evaluate_text_lengths, options_used=("hard_negatives",)),
)
