"""Fine-tune a short-caption CLIP to long captions with HiMo-CLIP and the baselines it is compared with, then evaluate
them on long captions; or run one of the paper's ablations.

    accelerate launch examples/train_himo.py                       # the paper's setting in miniature, CPU, minutes
    accelerate launch examples/train_himo.py --seeds 0,1,2         # the same over 3 seeds: mean +- std per cell
    accelerate launch examples/train_himo.py --ablation table5     # Table 5 (also table4, table6, table8)
    accelerate launch examples/train_himo.py --preset released     # MoLo as the official code trains it
    accelerate launch examples/train_himo.py --init_from_clip openai/clip-vit-large-patch14 ...

The paper fine-tunes a pretrained short-caption CLIP. Without `--init_from_clip`, that CLIP is a small CLIP-77
pretrained on the training scenes' first sentences for `--base_steps` (built once and cached under
`--base_cache_dir`, shared with train_onelip.py; row `clip-77-base`, evaluated as it is; `--base_steps 0` trains
every variant from scratch instead). Each variant then starts from it and is trained identically (same data order,
steps and optimiser) with its own objective:
  clip-77    77 text positions, global InfoNCE only
  clip-248   Long-CLIP stretching to 248 positions, global InfoNCE only
  longclip   Long-CLIP's own fine-tuning (248 positions, rows 0-19 frozen): long-caption InfoNCE + the first sentence
             against the images' first `--pca_components` principal components, label smoothing 0.1
  himo-clip  248 positions, MoLo = global + lambda * HiDe component InfoNCE (HiMo-CLIP Eq. 4)
  himo-clip-released  (not in the default list) MoLo with the official code's choices (`--preset released`)
`--preset` sets MoLo's options together: `paper` (Eq. 1-4 as written, the default) or `released` (HiDe per process,
its reconstruction not re-normalised, gathers without gradient, label smoothing 0.1); `--hide_tau`, `--molo_lambda`,
`--hide_scope`, `--label_smoothing`, `--normalize_components` and `--gather_grad` given explicitly override it
(`--label_smoothing` also Long-CLIP's 0.1).
`--ablation` trains, in the same setting, the rows of one of the paper's ablation tables instead (248 positions):
  table5  L_global; L_comp alone; L_global + L_comp^{u,v} (HiDe on both modalities); L_global + L_comp
  table4  HiDe threshold tau in 0.8, 0.85, 0.9, 0.95 (with m, the mean number of components kept)
  table6  MoLo weight lambda in 0.5, 1, 2
  table8  global batch size in half, 1x and 2x the batch per process (same epochs)
Evaluation on the test scenes: R@1 both ways, HiMo@2/3/K, SSI (distractor appended; lower is more stable).

Writes `<output_dir>/<variant>/` checkpoints (loadable with AutoModel/AutoProcessor and trust_remote_code=True),
`eval/<variant>.json`, `results.json`, `prefix_similarity.png`, `loss_curves.png` and `summary.json` (+ `.png`: --seeds)
(`<ablation>.json` / `.png` under `<output_dir>/<ablation>/` for an ablation); with `--seeds`, one such run per
seed under `seed-<s>/` and the summary over them.

The same script runs on one CPU or across GPUs and machines (`--config_file examples/accelerate_configs/
{single,multi_gpu,zero2,zero3}.yaml`), saves its full state every `--checkpointing_steps` and continues exactly
with `--resume_from_checkpoint latest`, trains LoRA adapters with `--lora_r 16`, and publishes each checkpoint
with a model card with `--push_to_hub --hub_model_id ORG/NAME`.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path

from hf_longclip.miniature import (
    SHORT_BASE_LENGTH,
    BackboneArguments,
    evaluate_base,
    load_synthetic_scenes,
    short_caption_base,
)
from hf_longclip.recipes import (
    Run,
    coverage,
    method,
    parse_variants,
    plot_prefix_similarity,
    publish,
    run_over_seeds,
    saved_options,
    start_run,
    train_variants,
)
from hf_longclip.recipes.himo_clip import ABLATIONS, PRESETS

HIMO = method("himo")
BASE = "clip-77-base"
MOLO_OPTIONS = ("hide_tau", "molo_lambda", "hide_scope", "label_smoothing", "normalize_components", "gather_grad")
METRICS = ("r1_i2t", "r1_t2i", "himo@2", "himo@3", "himo@k", "ssi")
LOOP_DEFAULTS = dict(output_dir="outputs/himo", num_train_epochs=2.5)


@dataclass
class ScriptArguments:
    variants: str = field(default="clip-77,clip-248,longclip,himo-clip",
                          metadata={"help": f"comma list of {list(HIMO.variants)}"})
    ablation: str | None = field(default=None,
                                 metadata={"help": f"train one ablation's rows instead: {list(ABLATIONS)}"})
    preset: str = field(default="paper", metadata={"help": f"MoLo's preset, one of {list(PRESETS)}: 'paper' (Eq. "
                                                           "1-4) or 'released' (the official code's); the options "
                                                           "below given explicitly override it"})
    hide_tau: float | None = field(default=None, metadata={"help": "HiDe explained-variance threshold (Sec. 3.2; "
                                                                   "both presets: 0.9)"})
    molo_lambda: float | None = field(default=None, metadata={"help": "MoLo component-loss weight (Eq. 4; both: 1)"})
    hide_scope: str | None = field(default=None, metadata={"help": "'global' (gathered batch, paper) or 'local' "
                                                                   "(per process, released) PCA"})
    label_smoothing: float | None = field(default=None, metadata={
        "help": "of every cross-entropy (paper: 0; released and Long-CLIP's fine-tuning: 0.1)"})
    normalize_components: bool | None = field(default=None, metadata={
        "help": "re-normalise HiDe's components (paper: true; released: false, the reconstruction as it is)"})
    gather_grad: bool | None = field(default=None, metadata={
        "help": "gathered features carry gradient (paper: true; released: false, a plain all_gather)"})
    pca_components: int = field(default=32, metadata={"help": "longclip: principal components of the images "
                                                                "matched to the first sentences (Long-CLIP: 32)"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes (images and captions)"})
    num_train: int = field(default=4000, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=512, metadata={"help": "synthetic test scenes, for the final evaluation"})

    def __post_init__(self):
        if self.ablation is not None and self.ablation not in ABLATIONS:
            raise ValueError(f"--ablation must be one of {list(ABLATIONS)}, got {self.ablation!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"--preset must be one of {list(PRESETS)}, got {self.preset!r}")

    def hide_tau_or_preset(self) -> float:
        """HiDe's threshold of this run (`--hide_tau`, else the preset's)."""
        return self.hide_tau if self.hide_tau is not None else PRESETS[self.preset]["hide_tau"]

    def rows(self) -> dict[str, tuple[str, dict]]:
        """{row: (variant, its options over the script's)} of this run: the chosen variants, or the ablation's rows
        (himo-clip with each row's options)."""
        if self.ablation:
            return {row: ("himo-clip", options) for row, options in ABLATIONS[self.ablation].items()}
        return {variant: (variant, {}) for variant in parse_variants(self.variants, HIMO.variants)}

    def options(self) -> dict:
        """MoLo's options of this run: the preset and those given explicitly."""
        return {"preset": self.preset, **{name: getattr(self, name) for name in MOLO_OPTIONS
                                          if getattr(self, name) is not None}}


def run(started: Run, dataset) -> dict[str, dict]:
    """One seed's run (`started.loop_args` are the seed's): the base (built or reused), every row fine-tuned from it
    and evaluated, plots, results."""
    args, backbone, loop_args, accelerator = (started.script_args, started.backbone, started.loop_args,
                                              started.accelerator)
    rows = args.rows()
    global_batch = loop_args.process_batch_size * accelerator.num_processes

    def evaluate(model, processor):
        return HIMO.evaluate(model, processor, dataset["test"], loop_args.per_device_eval_batch_size,
                             hide_tau=saved_options(model).get("hide_tau", args.hide_tau_or_preset()),
                             hide_batch_size=global_batch)

    def build(row):
        variant, options = rows[row]
        start, parts = backbone.start(dataset, HIMO.variants[variant]["positions"])
        return HIMO.build_variant(variant, start, parts, seed=loop_args.seed, pca_components=args.pca_components,
                                  trust_remote_code=backbone.trust_remote_code, **{**args.options(), **options})

    results, histories, given_base = {}, {}, backbone.init_from_clip
    if backbone.init_from_clip is None and backbone.base_steps > 0:
        backbone = replace(backbone, init_from_clip=short_caption_base(accelerator, backbone, dataset, loop_args))
        if not args.ablation and accelerator.is_main_process:  # the starting point, evaluated as it is
            results[BASE] = evaluate_base(accelerator, backbone.init_from_clip,
                                          backbone.processor_parts(dataset, SHORT_BASE_LENGTH), SHORT_BASE_LENGTH,
                                          evaluate, backbone.trust_remote_code)
    for factor in dict.fromkeys(options.get("batch_factor", 1.0) for _, options in rows.values()):
        chosen = [row for row, (_, options) in rows.items() if options.get("batch_factor", 1.0) == factor]
        if loop_args.contrastive_batch_size:  # the contrastive batch scales, chunks as they were (or smaller)
            batch = round(loop_args.contrastive_batch_size * factor)
            row_args = replace(loop_args, contrastive_batch_size=batch,
                               per_device_train_batch_size=min(loop_args.per_device_train_batch_size, batch))
        else:
            row_args = replace(loop_args,
                               per_device_train_batch_size=round(loop_args.per_device_train_batch_size * factor))
        trained, trained_histories = train_variants(accelerator, chosen, build, evaluate, dataset, row_args,
                                                    started.lora_args, run_args=started.run_args)
        results.update(trained)
        histories.update(trained_histories)
    if accelerator.is_main_process:
        first = next(iter(results.values()))
        plot_prefix_similarity({v: r["mean_similarity_by_prefix"] for v, r in results.items()},
                               Path(loop_args.output_dir) / "prefix_similarity.png",
                               coverage(first["num_images"], first["num_prefixes"], "caption prefixes (test split)"))
    publish(accelerator, results, histories, output_dir=loop_args.output_dir, metrics=metrics(args),
            card=HIMO.card, hub_args=started.hub_args, run_args=started.run_args, base_model=given_base,
            push_variants=list(rows))
    return results


def metrics(args: ScriptArguments) -> tuple[str, ...]:
    return (*METRICS, "hide_m") if args.ablation == "table4" else METRICS


def main() -> None:
    started = start_run("train_himo", ScriptArguments, LOOP_DEFAULTS, backbone=BackboneArguments)
    args, backbone, accelerator = started.script_args, started.backbone, started.accelerator
    with accelerator.main_process_first():
        dataset = load_synthetic_scenes(seed=args.dataset_seed, num_train=args.num_train, num_test=args.num_test,
                                        image_size=backbone.image_size)
    name = args.ablation or "summary"
    if args.ablation:
        ablation_dir = str(Path(started.loop_args.output_dir) / args.ablation)
        started = replace(started, loop_args=replace(started.loop_args, output_dir=ablation_dir))
    run_over_seeds(accelerator, started.loop_args, started.hub_args,
                   lambda seed_args: run(replace(started, loop_args=seed_args), dataset),
                   metrics(args), name=name, title=f"train_himo: {name}")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
