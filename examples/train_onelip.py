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
or, without one, a short-caption CLIP-77 built as train_himo.py's base but 64 wide (train_himo.py's is
128 wide, so the two scripts cache two bases): pretrained from scratch on the training scenes' first sentences for
`--base_steps` with global InfoNCE, built once and cached under `--base_cache_dir` (row `clip-77`, evaluated as it
is). Then
each variant starts from that base and is trained identically (same data order, steps and optimiser) in one stage:
  clip-248       Long-CLIP stretching of the position table (77 -> 248), global InfoNCE ("fine-tuned CLIP")
  longclip       Long-CLIP's whole fine-tuning (train_himo.py's row): the stretching, long-caption InfoNCE + the first
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
differ only after token 77 (chance 50; `ONELIP.evaluate`: `hf_longclip.evaluation.long_captions.evaluate_text_lengths`).

Writes `<output_dir>/<variant>/` checkpoints (AutoModel/AutoProcessor with trust_remote_code=True), `results.json`,
`loss_curves.png` and `recall_by_length.png` (Fig. 3). Multi-GPU, DeepSpeed, resume, LoRA and Hub push (of the
adapted variants, with `hf_longclip/recipes/onelip/model_card.md`) as in train_himo.py. The rows as data and how each
is built and trained: `hf_longclip.recipes.onelip.method` (`VARIANTS`, `build_variant`, `variant_groups`).
"""

from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from hf_longclip.miniature import BackboneArguments, load_synthetic_scenes, short_caption_base
from hf_longclip.recipes import (
    Run,
    late_difference_pairs,
    parse_variants,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
)
from hf_longclip.recipes.onelip import (
    BASE_LENGTH,
    CHOICES,
    DISTILLATION_LOSSES,
    TULIP_ADAM_EPSILON,
    TULIP_MAX_GRAD_NORM,
    check_onelip_start,
    evaluate_start,
    is_onelip_checkpoint,
    loss_notes,
    plot_figure_3,
    variant_groups,
)
from hf_longclip.recipes.registry import method

ONELIP = method("onelip")  # its variants (`ONELIP.variants`) and how each is built (`ONELIP.build_variant`)
METRICS = ("r1_i2t", "r1_t2i", "short_r1_i2t", "short_r1_t2i", "hard_r1_i2t", "hard_r1_t2i")
LOOP_DEFAULTS = dict(output_dir="outputs/onelip", max_steps=60, warmup_steps=10, learning_rate=2e-4,
                     logging_steps=10)
BACKBONE_DEFAULTS = dict(hidden_size=64)


@dataclass
class ScriptArguments:
    variants: str = field(default=",".join(CHOICES), metadata={"help": f"comma list of {list(CHOICES)}"})
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


def run(started: Run, dataset, bank_root: Path) -> dict[str, dict]:
    """One seed's run (`started.loop_args` are the seed's): the base (given, or the cached short-caption one), every
    variant adapted from it, Table 4's rows, Fig. 3, results."""
    script_args, backbone, loop_args, accelerator = (started.script_args, started.backbone, started.loop_args,
                                                     started.accelerator)
    variants = parse_variants(script_args.variants, CHOICES)
    test, trust_remote_code = dataset["test"], backbone.trust_remote_code
    base = (script_args.base_checkpoint or backbone.init_from_clip
            or short_caption_base(accelerator, backbone, dataset, loop_args))
    onelip_base = bool(script_args.base_checkpoint) and is_onelip_checkpoint(base, trust_remote_code)
    if onelip_base:
        check_onelip_start(base, variants, script_args.teacher_checkpoint)
    parts = replace(backbone, init_from_clip=base).processor_parts(dataset, BASE_LENGTH)  # the base's own
    pairs = late_difference_pairs(test, parts[0], BASE_LENGTH)

    def evaluate(model, processor):
        return ONELIP.evaluate(model, processor, test, pairs, loop_args.per_device_eval_batch_size)

    results, histories = evaluate_start(accelerator, base, parts, onelip_base, evaluate, trust_remote_code), {}
    for chosen, data, group_args, options in variant_groups(accelerator, variants, dataset, loop_args, script_args,
                                                            base, parts, bank_root, trust_remote_code):
        build = partial(ONELIP.build_variant, start=base, processor=parts, settings=script_args, seed=loop_args.seed,
                        onelip_start=onelip_base, trust_remote_code=trust_remote_code, **options)
        trained, trained_histories = train_variants(accelerator, chosen, build, evaluate, data, group_args,
                                                    started.lora_args, run_args=started.run_args)
        results.update(trained)
        histories.update(trained_histories)
    if accelerator.is_main_process:
        plot_figure_3(results, Path(loop_args.output_dir) / "recall_by_length.png")
        print(f"\nhard pairs: {len(pairs)} of the {len(test) // 2} test pairs differ only after token {BASE_LENGTH}; "
              f"short captions: {next(iter(results.values()))['num_short_texts']} distinct first sentences")
    publish(accelerator, results, histories, output_dir=loop_args.output_dir, metrics=METRICS,
            card=ONELIP.card, hub_args=started.hub_args, run_args=started.run_args,
            base_model=script_args.base_checkpoint or backbone.init_from_clip, push_variants=variants,
            loss_notes=loss_notes(script_args.weight_switch_fraction))
    return results


def main() -> None:
    started = start_run("train_onelip", ScriptArguments, {**LOOP_DEFAULTS, **BACKBONE_DEFAULTS},
                        backbone=BackboneArguments)
    script_args, accelerator = started.script_args, started.accelerator
    parse_variants(script_args.variants, CHOICES)  # fail before any work
    warn_synthetic_fine_tuning(script_args.base_checkpoint, started.loop_args)
    with accelerator.main_process_first():
        dataset = load_synthetic_scenes(seed=script_args.dataset_seed, num_train=script_args.num_train,
                                        num_test=script_args.num_test, image_size=started.backbone.image_size)
    bank_root = Path(started.loop_args.output_dir) / "negative_bank"  # one bank for every seed: data and base decide it
    run_over_seeds(accelerator, started.loop_args, started.hub_args,
                   lambda seed_args: run(replace(started, loop_args=seed_args), dataset, bank_root),
                   METRICS, title="train_onelip")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
