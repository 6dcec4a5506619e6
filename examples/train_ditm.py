"""Train with DITM's objective and the objectives it is compared with (its Table IV), then evaluate retrieval and
hierarchy on the synthetic scenes.

    accelerate launch examples/train_ditm.py                          # small models on CPU (base CLIP first)
    accelerate launch examples/train_ditm.py --backbone himo_clip     # the same objectives on HiMo-CLIP's backbone
    accelerate launch examples/train_ditm.py --backbone onelip        # ... or on OneLIP's (RoPE text encoder)
    accelerate launch examples/train_ditm.py --init_from_clip openai/clip-vit-base-patch16 \
        --lr_multipliers "vision_model=0.01,text_model=0.1" --layer_decay 0.7 --num_train_epochs 25   # Sec. IV-C.2

As in the paper (Sec. IV-C.2: the backbones start from CLIP), each variant fine-tunes a pretrained CLIP: with no
`--init_from_clip`, a small model of the chosen backbone is first trained from scratch with global InfoNCE for
`--base_steps` (row `clip-infonce`, the InfoNCE reference; hardest-negative triplet losses from random weights
collapse to one point), once: cached under `--base_cache_dir`, the same for every seed. DITM's base is a DITM model,
so its GPO pooling is pretrained with the towers and every variant starts as the base (a fresh GPO on a CLS-pooled
base would replace the pooling the base learned); from a real CLIP (`--init_from_clip`) GPO starts fresh and the
warm-up below trains it on the frozen vision transformer, as the paper does.
Each variant is then trained identically (same data order, captions, steps and optimiser) with its own objective:
  vse++           triplet loss with VSE++'s hardest negatives and its fixed margin 0.2 (every delta set to 0.6,
                  since DITM's margin 2 delta / tau is then 0.2)
  adaptive        the adaptive-margin triplet loss (Eq. 4-5, tau = 6)
  adaptive+order  adaptive triplet + lambda * generic-to-specific ordering (Eq. 7, lambda = 0.07)
Positives: each training scene's 3 graded descriptions (its HierarCaps-style levels 2-4; level 1 is the same
generic sentence for every scene) and its 3 full captions; each batch draws `captions_per_image` of them per image.
Descriptiveness (Eq. 1-2) is a cached column over the training positives. Warm-up (Sec. IV-C.2): all negatives and
a frozen vision transformer for the first `ditm_warmup_epochs`.

Writes `<output_dir>/<variant>/` checkpoints (AutoModel/AutoProcessor with trust_remote_code=True), `results.json`,
`loss_curves.png` and `levels.png` (Fig. 8(b) and 8(c)). Multi-GPU, DeepSpeed, resume, LoRA and Hub push as in
train_himo.py.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from accelerate.utils import DistributedType

from hf_longclip.miniature import BackboneArguments, evaluate_base, infonce_base, load_synthetic_scenes
from hf_longclip.recipes import (
    Run,
    coverage,
    method,
    parse_variants,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
)
from hf_longclip.recipes.ditm import (
    BACKBONES,
    LOSS_NOTES,
    DescriptivenessScorer,
    add_descriptiveness_column,
    base_model_class,
    plot_levels,
    with_positives,
)

DITM = method("ditm")
TEXT_POSITIONS = 248  # the synthetic captions run past 77 tokens
METRICS = ("r1_i2t", "r1_t2i", "rsum", "precision", "recall", "d_corr", "d_corr_image")
BASE = "clip-infonce"
# Fine-tuning (Sec. IV-C.2 scaled down): the backbones at a tenth of the rate of the new GPO and the projections.
LOOP_DEFAULTS = dict(output_dir="outputs/ditm", num_train_epochs=2.0, per_device_train_batch_size=32,
                     learning_rate=2e-4, lr_multipliers="vision_model=0.1,text_model=0.1",
                     ddp_find_unused_parameters=True, base_steps=250)


@dataclass
class ScriptArguments:
    variants: str = field(default="vse++,adaptive,adaptive+order",
                          metadata={"help": f"comma list of {list(DITM.variants)}"})
    backbone: str = field(default="ditm", metadata={"help": f"model trained with the objectives: {list(BACKBONES)}"})
    margin_scale: float = field(default=6.0, metadata={"help": "tau of the adaptive margins (Eq. 4)"})
    order_weight: float = field(default=0.07, metadata={"help": "lambda of the ordering loss (Eq. 7)"})
    captions_per_image: int = field(default=3, metadata={"help": "positives drawn per image in each batch"})
    ditm_warmup_epochs: float = field(default=0.25, metadata={
        "help": "epochs with all negatives and a frozen vision transformer (Sec. IV-C.2: 2 of 25; 0: off)"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes (images and captions)"})
    num_train: int = field(default=1500, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=512, metadata={"help": "synthetic test scenes, for the final evaluation"})

    def __post_init__(self):
        if self.backbone not in BACKBONES:
            raise ValueError(f"--backbone must be one of {list(BACKBONES)}, got {self.backbone!r}")


def run(started: Run, scenes, dataset, warmup_steps: int) -> dict[str, dict]:
    """One seed's run (`started.loop_args` are the seed's): the base InfoNCE CLIP (unless given), every variant
    fine-tuned from it, Fig. 8, results."""
    script_args, backbone, loop_args, accelerator = (started.script_args, started.backbone, started.loop_args,
                                                     started.accelerator)
    variants = parse_variants(script_args.variants, DITM.variants)
    test = scenes["test"]

    def evaluate_on_test(model, processor):
        return DITM.evaluate(model, processor, test, loop_args.per_device_eval_batch_size)

    base, results, histories = backbone.init_from_clip, {}, {}
    if base is None:  # the pretrained CLIP the paper starts from, here trained from scratch with InfoNCE, once
        base, histories[BASE] = infonce_base(accelerator, BASE, backbone, dataset, TEXT_POSITIONS, loop_args,
                                             base_model_class(script_args.backbone))
    parts = replace(backbone, init_from_clip=base).processor_parts(dataset, TEXT_POSITIONS)  # the base's own
    if BASE in histories and accelerator.is_main_process:
        results[BASE] = evaluate_base(accelerator, base, parts, TEXT_POSITIONS, evaluate_on_test)
    adapted, adapted_histories = train_variants(
        accelerator, variants, lambda variant: DITM.build_variant(
            variant, base, parts, seed=loop_args.seed, backbone=script_args.backbone, warmup_steps=warmup_steps,
            margin_scale=script_args.margin_scale, order_weight=script_args.order_weight,
            captions_per_image=script_args.captions_per_image, trust_remote_code=backbone.trust_remote_code),
        evaluate_on_test, dataset, loop_args, started.lora_args, run_args=started.run_args,
    )
    results.update(adapted)
    histories.update(adapted_histories)
    if accelerator.is_main_process:
        levels = test["levels"]
        test_scores = DescriptivenessScorer().fit(text for chain in levels for text in chain)  # Sec. IV-E: test pool
        by_level = torch.tensor(test_scores.scores([text for chain in levels for text in chain]))
        plot_levels(by_level.reshape(len(levels), -1).T.tolist(),
                    {v: r["distance_by_level"] for v, r in results.items()},
                    Path(loop_args.output_dir) / "levels.png",
                    coverage(len(levels), len(levels) * len(levels[0]), "level texts (test split)"))
    publish(accelerator, results, histories, output_dir=loop_args.output_dir, metrics=METRICS,
            card=DITM.card, hub_args=started.hub_args, run_args=started.run_args,
            base_model=backbone.init_from_clip, push_variants=variants, loss_notes=LOSS_NOTES)
    return results


def main() -> None:
    started = start_run("train_ditm", ScriptArguments, LOOP_DEFAULTS, backbone=BackboneArguments)
    script_args, backbone, loop_args, accelerator = (started.script_args, started.backbone, started.loop_args,
                                                     started.accelerator)
    parse_variants(script_args.variants, DITM.variants)  # fail before any work
    with accelerator.main_process_first():
        scenes = load_synthetic_scenes(seed=script_args.dataset_seed, num_train=script_args.num_train,
                                       num_test=script_args.num_test, image_size=backbone.image_size)
        dataset = with_positives(scenes)
        scorer = DescriptivenessScorer().fit(text for texts in dataset["train"]["positives"] for text in texts)
        for split in ("train", "validation"):
            dataset[split] = add_descriptiveness_column(dataset[split], "positives", scorer=scorer)
    if accelerator.distributed_type == DistributedType.DEEPSPEED and script_args.ditm_warmup_epochs > 0:
        raise SystemExit("--ditm_warmup_epochs needs one process or DDP: DeepSpeed's optimizer still steps the frozen "
                         "vision parameters (zero gradients advance their Adam moments, weight decay applies); "
                         "pass --ditm_warmup_epochs 0 under DeepSpeed")
    images_per_step = (loop_args.process_batch_size * accelerator.num_processes
                       * loop_args.gradient_accumulation_steps)
    warmup_steps = int(script_args.ditm_warmup_epochs * len(dataset["train"]) / images_per_step)
    run_over_seeds(accelerator, loop_args, started.hub_args,
                   lambda seed_args: run(replace(started, loop_args=seed_args), scenes, dataset, warmup_steps),
                   METRICS, title="train_ditm")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
