"""Train HiMo-CLIP and the baselines it is compared with, then evaluate them on long captions.

    accelerate launch examples/train_himo.py                       # small models from scratch, synthetic scenes, CPU
    accelerate launch examples/train_himo.py --init_from_clip openai/clip-vit-large-patch14 ...

Each variant is trained identically (same data order, steps and optimiser) with its own objective:
  clip-77    CLIP with 77 text positions, global InfoNCE only
  clip-248   the same with 248 positions (Long-CLIP stretching when starting from CLIP), global InfoNCE only
  himo-clip  248 positions, MoLo = global + lambda * HiDe component InfoNCE (HiMo-CLIP Eq. 4)
Writes `<output_dir>/<variant>/` checkpoints (loadable with AutoModel/AutoProcessor and trust_remote_code=True),
`eval/<variant>.json`, `results.json`, `prefix_similarity.png` and `loss_curves.png`.

The same script runs on one CPU or across GPUs and machines (`--config_file examples/accelerate_configs/
{single,multi_gpu,zero2,zero3}.yaml`), saves its full state every `--checkpointing_steps` and continues exactly
with `--resume_from_checkpoint latest`, trains LoRA adapters with `--lora_r 16`, and publishes each checkpoint
with a model card with `--push_to_hub --hub_model_id ORG/NAME`.
"""

from dataclasses import dataclass, field
from pathlib import Path

from accelerate.utils import set_seed

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.evaluation import evaluate_long_captions
from hf_longclip.models.himo_clip import HIMO_CLIP_CARD
from hf_longclip.plots import coverage, plot_prefix_similarity
from hf_longclip.training.recipe import (
    BackboneArguments,
    parse_variants,
    publish,
    start_run,
    train_variants,
)
from hf_longclip.training.task import ContrastiveTask

VARIANTS = {  # name: (text positions, MoLo lambda or None for the configured one)
    "clip-77": (77, 0.0),
    "clip-248": (248, 0.0),
    "himo-clip": (248, None),
}
MODEL_CARD = Path(__file__).resolve().parents[1] / "model_cards" / "himo_clip.md"
METRICS = ("r1_i2t", "r1_t2i", "himo@2", "himo@3", "himo@k")
LOOP_DEFAULTS = dict(output_dir="outputs/himo", num_train_epochs=2.5)


@dataclass
class ScriptArguments:
    variants: str = field(default="clip-77,clip-248,himo-clip", metadata={"help": f"comma list of {list(VARIANTS)}"})
    hide_tau: float = field(default=0.9, metadata={"help": "HiDe explained-variance threshold (Sec. 3.2)"})
    molo_lambda: float = field(default=1.0, metadata={"help": "MoLo component-loss weight (Eq. 4)"})
    hide_scope: str = field(default="global", metadata={"help": "'global' (gathered batch) or 'local' PCA"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes (images and captions)"})
    num_train: int = field(default=4000, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=512, metadata={"help": "synthetic test scenes, for the final evaluation"})


def build(args: ScriptArguments, backbone: BackboneArguments, dataset, variant: str,
          seed: int) -> tuple[ContrastiveTask, HiMoCLIPProcessor]:
    positions, molo_lambda = VARIANTS[variant]
    options = dict(hide_tau=args.hide_tau, molo_lambda=args.molo_lambda if molo_lambda is None else molo_lambda,
                   hide_scope=args.hide_scope)
    set_seed(seed)  # identical initialisation for every variant
    tokenizer, image_processor = backbone.processor_parts(dataset, positions)
    if backbone.init_from_clip:
        model = HiMoCLIPModel.from_clip(backbone.init_from_clip, stretch_positions=positions > 77, **options)
    else:
        model = HiMoCLIPModel(HiMoCLIPConfig(**backbone.scratch_towers(tokenizer, positions), **options))
    processor = HiMoCLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=positions)
    return ContrastiveTask(model, ImageTextCollator(processor)), processor


def main() -> None:
    script_args, backbone, loop_args, lora_args, hub_args, accelerator, run_args = start_run(
        "train_himo", ScriptArguments, LOOP_DEFAULTS)
    variants = parse_variants(script_args.variants, VARIANTS)
    with accelerator.main_process_first():
        dataset = load_synthetic_scenes(
            seed=script_args.dataset_seed, num_train=script_args.num_train, num_test=script_args.num_test,
            image_size=backbone.image_size,
        )
    results, histories = train_variants(
        accelerator, variants, lambda variant: build(script_args, backbone, dataset, variant, loop_args.seed),
        lambda model, processor: evaluate_long_captions(model, processor, dataset["test"],
                                                        loop_args.per_device_eval_batch_size),
        dataset, loop_args, lora_args,
    )
    if accelerator.is_main_process:
        first = next(iter(results.values()))
        plot_prefix_similarity({v: r["mean_similarity_by_prefix"] for v, r in results.items()},
                               Path(loop_args.output_dir) / "prefix_similarity.png",
                               coverage(first["num_images"], first["num_prefixes"], "caption prefixes (test split)"))
    publish(accelerator, results, histories, output_dir=loop_args.output_dir, metrics=METRICS,
            card_template=MODEL_CARD, card_info=HIMO_CLIP_CARD, hub_args=hub_args, run_args=run_args,
            base_model=backbone.init_from_clip)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
