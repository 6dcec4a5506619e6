"""Adapt a 77-token CLIP to long captions in one stage with OneLIP and compare it with the baselines of its Table 1 /
Table 4 and its Fig. 3 on the synthetic scenes.

    accelerate launch examples/train_onelip.py                                      # CPU, minutes, from its own base
    accelerate launch examples/train_onelip.py --seeds 0,1,2                        # mean +- std over 3 seeds
    accelerate launch examples/train_onelip.py --base_checkpoint openai/clip-vit-base-patch16 --variants onelip
    accelerate launch examples/train_onelip.py --base_checkpoint tulip-vit-l-14 \
        --teacher_checkpoint openai/clip-vit-large-patch14 --variants onelip              # from TULIP's weights

First the base: a 77-token CLIP (`--base_checkpoint`: a CLIPModel directory or Hub id, ours or transformers'; or a
OneLIP checkpoint such as converted TULIP weights, which the OneLIP rows then start from, row `base`, with the CLIP
of `--teacher_checkpoint` as teacher),
or, without one, a short-caption CLIP-77 built by the recipe of train_himo.py's base but 64 wide (train_himo.py's is
128 wide, so the two scripts cache two bases): pretrained from scratch on the training scenes' first sentences for
`--base_steps` with global InfoNCE, built once and cached under `--base_cache_dir` (row `clip-77`, evaluated as it
is). Then
each variant starts from that base and is trained identically (same data order, steps and optimiser) in one stage:
  clip-248       Long-CLIP stretching of the position table (77 -> 248), global InfoNCE ("fine-tuned CLIP")
  longclip       Long-CLIP's whole recipe (train_himo.py's row): the stretching, long-caption InfoNCE + the first
                 sentence against the images' 32 principal components, label smoothing 0.1
  onelip-pooled  OneLIP without TRIM: RoPE/NTK encoder, L_coarse + pooled distillation + contrastive (Table 4)
  onelip         OneLIP: RoPE/NTK encoder, L_coarse + TRIM token-wise distillation + contrastive (Eq. 10)
  clip-77-ft, clip-128, onelip-77, onelip-128: the same at other maximum training lengths, for Fig. 3 (the CLIP
                 rows keep 77 positions at 77 and use the stretched 248-position table truncated at 128)
Then (`tulip`), TULIP's two-stage pipeline (`hf_longclip.recipes.onelip.tulip`) from the same base in
as many optimizer steps as each one-stage row, as TULIP's release trains them: `tulip-distill` (stage 1: the RoPE
student TULIP builds from the base, distilled from the frozen base's text embeddings of the captions cut at 77 tokens,
`--tulip_distill_steps`, loss `--tulip_distill_loss`), then `tulip` (stage 2: CLIP's loss of both towers on the long
captions, tokenised at 600, plus on their first sentences, RoPE NTK-scaled from 248 to 600 tokens) for the remaining
steps, both with TULIP's AdamW epsilon and no clipping (`--tulip_adam_epsilon`, `--tulip_max_grad_norm`); each stage
is its own run (logged, checkpointed, resumed, evaluated).
Then Table 4's hard-negative rows, each trained for `--table4_epochs` passes over the first `--table4_train`
training scenes (PO-HNM's refresh needs samples to come back), again from the same base and identically:
  table4-trim        OneLIP (TRIM), no hard negatives
  table4-hnm         + offline HNM: M queued negatives per sample, mined once by the base model
  table4-pohnm-half  + PO-HNM with M/2 negatives, refreshed by Eq. 9 every --hnm_update_steps
  table4-pohnm       + PO-HNM with M negatives
The negative bank (the base's embeddings of the training captions) is built once under
`<output_dir>/negative_bank/` (or `--negative_bank`) and reused by later runs (and seeds) on the same data and base.
The frozen base text encoder is OneLIP's teacher (held by `OneLIPTask`, never saved). Evaluation: R@1 both ways on
the test scenes' long captions, on their first sentence (short) and within the hard-negative pairs whose captions
differ only after token 77 (chance 50; `hf_longclip.evaluation.long_captions.evaluate_text_lengths`).

Writes `<output_dir>/<variant>/` checkpoints (AutoModel/AutoProcessor with trust_remote_code=True), `results.json`,
`loss_curves.png` and `recall_by_length.png` (Fig. 3). Multi-GPU, DeepSpeed, resume, LoRA and Hub push (of the
adapted variants, with `hf_longclip/recipes/onelip/model_card.md`) as in train_himo.py.
"""

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import set_seed
from datasets import DatasetDict
from transformers import AutoConfig

from hf_longclip import (
    HiMoCLIPModel,
    HiMoCLIPProcessor,
    OneLIPConfig,
    OneLIPForPreTraining,
    OneLIPModel,
    OneLIPProcessor,
)
from hf_longclip.miniature import BackboneArguments, evaluate_base, load_synthetic_scenes, short_caption_base
from hf_longclip.recipes import (
    FirstSentenceCollator,
    ImageTextCollator,
    LongCLIPTask,
    LoopArguments,
    evaluate_text_lengths,
    late_difference_pairs,
    load_clip,
    parse_variants,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
    whole_model_init,
)
from hf_longclip.recipes.himo_clip import HiMoCLIPTask
from hf_longclip.recipes.onelip import (
    CARD,
    DISTILLATION_LOSSES,
    TULIP_ADAM_EPSILON,
    TULIP_MAX_GRAD_NORM,
    HardNegativeQueues,
    NegativeBank,
    OneLIPTask,
    default_bank_directory,
    distillation_stage,
    finetuning_stage,
    loss_notes,
    model_digest,
    plot_recall_by_length,
    set_rope_scaling,
)

BASE = "clip-77"
ONELIP_BASE = "base"  # the row of a OneLIP --base_checkpoint (e.g. converted TULIP weights), evaluated as it is
BASE_LENGTH = 77
VARIANTS = {  # name: (method, maximum training length); "clip": Long-CLIP stretching + global InfoNCE
    "clip-248": ("clip", 248),
    "longclip": ("longclip", 248),
    "onelip-pooled": ("pooled", 248),
    "onelip": ("trim", 248),
    "clip-77-ft": ("clip", 77),
    "clip-128": ("clip", 128),
    "onelip-77": ("trim", 77),
    "onelip-128": ("trim", 128),
}
ONELIP_METHODS = ("pooled", "trim")  # the others adapt a CLIPModel (HiMoCLIPModel.from_clip)
TULIP_STAGES = ("tulip-distill", "tulip")  # `--variants tulip` trains both, in this order
TABLE4 = {  # Table 4's rows: name -> (queue size as a fraction of --hnm_queue_size M, refreshed online)
    "table4-trim": (0.0, False),
    "table4-hnm": (1.0, False),
    "table4-pohnm-half": (0.5, True),
    "table4-pohnm": (1.0, True),
}
FIG3_LINES = {"clip": "fine-tuned CLIP (Long-CLIP stretching)", "trim": "OneLIP"}
METRICS = ("r1_i2t", "r1_t2i", "short_r1_i2t", "short_r1_t2i", "hard_r1_i2t", "hard_r1_t2i")
LOOP_DEFAULTS = dict(output_dir="outputs/onelip", max_steps=60, warmup_steps=10, learning_rate=2e-4,
                     logging_steps=10)
BACKBONE_DEFAULTS = dict(hidden_size=64)


@dataclass
class ScriptArguments:
    variants: str = field(default=",".join([*VARIANTS, "tulip", *TABLE4]),
                          metadata={"help": f"comma list of {[*VARIANTS, 'tulip', *TABLE4]}"})
    base_checkpoint: str | None = field(default=None, metadata={
        "help": "77-token CLIPModel directory or Hub id to adapt (also the teacher), or a OneLIP checkpoint (e.g. "
                "converted TULIP weights: the OneLIP rows start from it, its own text encoder the teacher); None: "
                "train one from scratch (same as --init_from_clip)"})
    teacher_checkpoint: str | None = field(default=None, metadata={
        "help": "with a OneLIP --base_checkpoint (e.g. converted TULIP weights): the 77-token CLIPModel whose frozen "
                "text encoder is OneLIP's teacher (TULIP's own CLIP, e.g. openai/clip-vit-large-patch14)"})
    weight_switch_fraction: float = field(default=0.5, metadata={
        "help": "fraction of the adaptation's optimizer steps after which Eq. 10's weights switch (Sec. 4.1: "
                "step 5000)"})
    trim_top_k: int = field(default=100, metadata={"help": "K of TRIM-Select (Eq. 5)"})
    trim_rank: int = field(default=8, metadata={"help": "r of TRIM-Select's structural importance (Eq. 4)"})
    trim_alpha: float = field(default=0.5, metadata={"help": "alpha of S(i) (Eq. 5)"})
    tulip_distill_steps: int = field(default=-1, metadata={
        "help": "the tulip variant's stage-1 (distillation) optimizer steps; stage 2 takes the rest of the steps "
                "every one-stage row trains for (-1: half of them)"})
    tulip_distill_loss: str = field(default="cosine", metadata={
        "help": f"the tulip variant's distillation loss, one of {DISTILLATION_LOSSES} (TULIP's run script: cosine)"})
    tulip_adam_epsilon: float = field(default=TULIP_ADAM_EPSILON, metadata={
        "help": "the tulip variant's AdamW epsilon in both stages (TULIP's training/params.py:10: 1e-6)"})
    tulip_max_grad_norm: float = field(default=TULIP_MAX_GRAD_NORM, metadata={
        "help": "the tulip variant's gradient clipping in both stages (0: off, as TULIP's --grad-clip-norm default)"})
    hnm_queue_size: int = field(default=16, metadata={
        "help": "M, hard negatives queued per sample (Sec. 4.1: 1024 of 1.2M captions)"})
    hnm_update_steps: int = field(default=8, metadata={
        "help": "T_update: optimizer steps before a sample's queue is re-scored (Sec. 4.1: 2000, 0.4 epochs)"})
    hnm_beta: float = field(default=0.6, metadata={"help": "beta of the difficulty d (Eq. 8)"})
    hnm_theta: float = field(default=0.4, metadata={"help": "theta of Eq. 9: negatives with d <= theta are easy"})
    hnm_delta: float = field(default=0.05, metadata={"help": "delta of Eq. 9: |d - d_prev| < delta is stagnant"})
    negative_bank: str | None = field(default=None, metadata={
        "help": "directory of the negative bank; default <output_dir>/negative_bank/<data fingerprint>-<base>"})
    table4_train: int = field(default=1000, metadata={"help": "training scenes of the Table 4 rows"})
    table4_epochs: int = field(default=4, metadata={"help": "passes over them of each Table 4 row"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes (images and captions)"})
    num_train: int = field(default=4000, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=512, metadata={"help": "synthetic test scenes, for the final evaluation"})

    def __post_init__(self):
        if not 0.0 <= self.weight_switch_fraction <= 1.0:
            raise ValueError(f"weight_switch_fraction must be in [0, 1], got {self.weight_switch_fraction}")
        if self.tulip_distill_loss not in DISTILLATION_LOSSES:
            raise ValueError(f"tulip_distill_loss must be one of {DISTILLATION_LOSSES}, "
                             f"got {self.tulip_distill_loss!r}")


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


def build(args: ScriptArguments, base: str, parts: tuple, variant: str, seed: int, switch_step: int,
          bank: NegativeBank | None = None, output_dir: str = "", trust_remote_code: bool = False,
          onelip_base: bool = False):
    """(task, processor) of `variant`, adapted from the base CLIP at `base` (its own code runs only with
    `trust_remote_code`); Table 4's rows queue hard negatives from `bank`, their live queues under
    `output_dir`/hard_negatives/. With `onelip_base` (a OneLIP checkpoint, e.g. converted TULIP weights) the model
    starts from its weights, T_g set to the variant's length, its RoPE scaling kept, and the teacher is the text
    encoder of the CLIP `args.teacher_checkpoint`."""
    method, length = VARIANTS.get(variant, ("trim", 248))
    tokenizer, image_processor = parts
    set_seed(seed)  # identical initialisation of every new weight (TRIM-Refine's queries) for every variant
    if onelip_base:
        model = OneLIPForPreTraining.from_pretrained(base, dtype=torch.float32, trust_remote_code=trust_remote_code)
        set_rope_scaling(model.onelip, model.config.text_config.rope_ntk_scaling, max_length=length)
        teacher = load_clip(args.teacher_checkpoint, trust_remote_code)
    else:
        teacher = clip = load_clip(base, trust_remote_code)
        if method in ("clip", "longclip"):
            model = HiMoCLIPModel.from_clip(clip, stretch_positions=length > BASE_LENGTH)
            processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=length)
            if method == "longclip":
                return LongCLIPTask(model, FirstSentenceCollator(processor)), processor
            return HiMoCLIPTask(model, ImageTextCollator(processor), molo_lambda=0.0), processor
        model = OneLIPForPreTraining.from_clip(clip, max_length=length)
    processor = OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=length)
    options = dict(token_distillation=method, trim_top_k=args.trim_top_k, trim_rank=args.trim_rank,
                   trim_alpha=args.trim_alpha, weight_switch_step=switch_step)
    fraction, online = TABLE4.get(variant, (0.0, False))
    if not fraction:
        return OneLIPTask(model, ImageTextCollator(processor), teacher=teacher, **options), processor
    queues = HardNegativeQueues(bank, Path(output_dir) / "hard_negatives" / variant,
                                queue_size=max(1, round(fraction * args.hnm_queue_size)),
                                update_steps=args.hnm_update_steps, beta=args.hnm_beta, theta=args.hnm_theta,
                                delta=args.hnm_delta, online=online)
    collate = ImageTextCollator(processor, index_column="sample_index")
    return OneLIPTask(model, collate, teacher=teacher, hard_negatives=queues, **options), processor


def train_tulip(accelerator, args: ScriptArguments, base: str, parts: tuple, dataset, loop_args: LoopArguments,
                lora_args, evaluate, run_args: dict, total_steps: int,
                trust_remote_code: bool = False) -> tuple[dict, dict]:
    """TULIP's two stages in `total_steps` optimizer steps, as many as each one-stage row: `tulip-distill` for
    `args.tulip_distill_steps` (half by default), then `tulip`, built from `tulip-distill`'s saved checkpoint, for the
    rest, both with TULIP's AdamW epsilon and gradient clipping (`--tulip_adam_epsilon`, `--tulip_max_grad_norm`).
    Each stage is a run of its own, so each is logged, checkpointed and resumed as any variant is (a resumed run skips
    a finished stage 1)."""
    distill_steps = args.tulip_distill_steps if args.tulip_distill_steps >= 0 else total_steps // 2
    if not 0 < distill_steps < total_steps:
        raise SystemExit(f"--tulip_distill_steps must leave both stages at least one of the {total_steps} optimizer "
                         f"steps, got {distill_steps}")
    tokenizer, image_processor = parts
    distilled_dir = Path(loop_args.output_dir) / TULIP_STAGES[0]
    stage_args = replace(loop_args, adam_epsilon=args.tulip_adam_epsilon, max_grad_norm=args.tulip_max_grad_norm)

    def build_stage(stage: str):
        set_seed(loop_args.seed)
        clip = load_clip(base, trust_remote_code)
        if stage == TULIP_STAGES[0]:
            return distillation_stage(clip, tokenizer, image_processor, loss_type=args.tulip_distill_loss)
        distilled = OneLIPModel.from_pretrained(distilled_dir, dtype=torch.float32)
        return finetuning_stage(distilled, clip, tokenizer, image_processor)

    results, histories = {}, {}
    for stage, steps in zip(TULIP_STAGES, (distill_steps, total_steps - distill_steps)):
        stage_results, stage_histories = train_variants(
            accelerator, [stage], build_stage, evaluate, dataset, replace(stage_args, max_steps=steps), lora_args,
            run_args=run_args)
        results.update(stage_results)
        histories.update(stage_histories)
    return results, histories


def train_table4(accelerator, args: ScriptArguments, variants: list[str], base: str, parts: tuple, dataset,
                 loop_args: LoopArguments, lora_args, evaluate, bank_root: Path, run_args: dict,
                 trust_remote_code: bool = False) -> tuple[dict, dict]:
    """Table 4's rows: `args.table4_epochs` passes over the first `args.table4_train` training scenes (their
    dataset indices in a `sample_index` column, PO-HNM's queue rows), the negative bank built or reused first."""
    count = min(args.table4_train, len(dataset["train"]))
    train = dataset["train"].select(range(count))
    data = DatasetDict(train=train.add_column("sample_index", np.arange(count)), validation=dataset["validation"])
    table4_args = replace(loop_args, max_steps=-1, num_train_epochs=args.table4_epochs)
    switch_step = round(args.weight_switch_fraction * optimizer_steps(table4_args, count, accelerator.num_processes))
    bank = None
    if any(TABLE4[variant][0] for variant in variants):
        with whole_model_init(accelerator):
            base_clip = load_clip(base, trust_remote_code)
        digest = model_digest(base_clip)
        directory = args.negative_bank or default_bank_directory(bank_root, data["train"], digest)
        processor = HiMoCLIPProcessor(image_processor=parts[1], tokenizer=parts[0], max_length=BASE_LENGTH)
        bank = NegativeBank.build_or_load(directory, data["train"], base_clip, processor, accelerator,
                                          batch_size=loop_args.per_device_eval_batch_size, base_digest=digest)
    return train_variants(
        accelerator, variants,
        lambda variant: build(args, base, parts, variant, loop_args.seed, switch_step, bank, loop_args.output_dir,
                              trust_remote_code),
        evaluate, data, table4_args, lora_args, run_args=run_args,
    )


def plot_figure_3(results: dict, path: Path) -> None:
    panels = {}
    for panel, keys in (("long captions: mean R@1 (I2T, T2I)", ("r1_i2t", "r1_t2i")),
                        ("pairs differing after token 77: mean R@1", ("hard_r1_i2t", "hard_r1_t2i"))):
        lines = {}
        for variant, (method, length) in VARIANTS.items():
            if method in FIG3_LINES and variant in results:
                lines.setdefault(FIG3_LINES[method], {})[length] = sum(results[variant][k] for k in keys) / 2
        panels[panel] = lines
    reference = None
    if BASE in results:
        reference = {panel: sum(results[BASE][k] for k in keys) / 2 for panel, keys in
                     zip(panels, (("r1_i2t", "r1_t2i"), ("hard_r1_i2t", "hard_r1_t2i")))}
    first = next(iter(results.values()))
    plot_recall_by_length(panels, path, f"{first['num_images']:,} test images; {first['num_hard_pairs']} hard pairs "
                                        f"differ only after token {BASE_LENGTH}", reference=reference)


def run(script_args: ScriptArguments, backbone: BackboneArguments, loop_args: LoopArguments, lora_args, hub_args,
        accelerator, run_args: dict, dataset, bank_root: Path) -> dict[str, dict]:
    """One seed's run: the base (given, or the cached short-caption one), every variant adapted from it, Table 4's
    rows, Fig. 3, results."""
    variants = parse_variants(script_args.variants, [*VARIANTS, "tulip", *TABLE4])
    test, batch_size = dataset["test"], loop_args.per_device_eval_batch_size
    base = (script_args.base_checkpoint or backbone.init_from_clip
            or short_caption_base(accelerator, backbone, dataset, loop_args))
    onelip_base = bool(script_args.base_checkpoint) and is_onelip_checkpoint(base, backbone.trust_remote_code)
    refused = [v for v in variants if v not in VARIANTS or VARIANTS[v][0] not in ONELIP_METHODS]
    if onelip_base and refused:
        raise SystemExit(f"--base_checkpoint {base} holds a OneLIP checkpoint: only the OneLIP rows "
                         f"{[v for v, (method, _) in VARIANTS.items() if method in ONELIP_METHODS]} start from it, not "
                         f"{refused} (they need a 77-token CLIPModel)")
    if onelip_base and not script_args.teacher_checkpoint:
        raise SystemExit(f"--base_checkpoint {base} holds a OneLIP checkpoint: name the CLIP whose text encoder is "
                         f"OneLIP's teacher with --teacher_checkpoint (for TULIP weights, the CLIP TULIP started from)")
    parts = replace(backbone, init_from_clip=base).processor_parts(dataset, BASE_LENGTH)  # the base's own
    pairs = late_difference_pairs(test, parts[0], BASE_LENGTH)

    def evaluate(model, processor):
        return evaluate_text_lengths(model, processor, test, pairs, batch_size)

    results, histories = {}, {}
    base_row = ONELIP_BASE if onelip_base else BASE
    if accelerator.is_main_process and onelip_base:  # the OneLIP base as it is, at its own length
        with whole_model_init(accelerator):
            model = OneLIPModel.from_pretrained(base, dtype=torch.float32, trust_remote_code=backbone.trust_remote_code)
        processor = OneLIPProcessor(image_processor=parts[1], tokenizer=parts[0],
                                    max_length=model.config.text_config.max_position_embeddings)
        results[base_row] = evaluate(model.to(accelerator.device), processor)
    elif accelerator.is_main_process:  # the base, evaluated as it is
        results[BASE] = evaluate_base(accelerator, base, parts, BASE_LENGTH, evaluate, backbone.trust_remote_code)
    # every variant adapted from the base in one stage
    total = optimizer_steps(loop_args, len(dataset["train"]), accelerator.num_processes)
    switch_step = round(script_args.weight_switch_fraction * total)
    if chosen := [variant for variant in variants if variant in VARIANTS]:
        adapted, adapted_histories = train_variants(
            accelerator, chosen, lambda variant: build(script_args, base, parts, variant, loop_args.seed, switch_step,
                                  trust_remote_code=backbone.trust_remote_code, onelip_base=onelip_base),
            evaluate, dataset, loop_args, lora_args, run_args=run_args,
        )
        results.update(adapted)
        histories.update(adapted_histories)
    if "tulip" in variants:
        adapted, adapted_histories = train_tulip(accelerator, script_args, base, parts, dataset, loop_args, lora_args,
                                                 evaluate, run_args, total, backbone.trust_remote_code)
        results.update(adapted)
        histories.update(adapted_histories)
    if chosen := [variant for variant in variants if variant in TABLE4]:
        adapted, adapted_histories = train_table4(accelerator, script_args, chosen, base, parts, dataset, loop_args,
                                                  lora_args, evaluate, bank_root, run_args, backbone.trust_remote_code)
        results.update(adapted)
        histories.update(adapted_histories)
    if accelerator.is_main_process:
        plot_figure_3(results, Path(loop_args.output_dir) / "recall_by_length.png")
        print(f"\nhard pairs: {len(pairs)} of the {len(test) // 2} test pairs differ only after token {BASE_LENGTH}; "
              f"short captions: {results[base_row]['num_short_texts']} distinct first sentences")
    publish(accelerator, results, histories, output_dir=loop_args.output_dir, metrics=METRICS,
            card=CARD, hub_args=hub_args, run_args=run_args,
            base_model=script_args.base_checkpoint or backbone.init_from_clip, push_variants=variants,
            loss_notes=loss_notes(script_args.weight_switch_fraction))
    return results


def main() -> None:
    started = start_run("train_onelip", ScriptArguments, {**LOOP_DEFAULTS, **BACKBONE_DEFAULTS},
                        backbone=BackboneArguments)
    script_args, backbone, loop_args, lora_args, hub_args, accelerator, run_args = (
        started.script_args, started.backbone, started.loop_args, started.lora_args, started.hub_args,
        started.accelerator, started.run_args)
    parse_variants(script_args.variants, [*VARIANTS, "tulip", *TABLE4])  # fail before any work
    warn_synthetic_fine_tuning(script_args.base_checkpoint, loop_args)
    with accelerator.main_process_first():
        dataset = load_synthetic_scenes(seed=script_args.dataset_seed, num_train=script_args.num_train,
                                        num_test=script_args.num_test, image_size=backbone.image_size)
    bank_root = Path(loop_args.output_dir) / "negative_bank"  # one bank for every seed: it depends on data and base
    run_over_seeds(accelerator, loop_args, hub_args,
                   lambda seed_args: run(script_args, backbone, seed_args, lora_args, hub_args, accelerator, run_args,
                                         dataset, bank_root),
                   METRICS, title="train_onelip")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
