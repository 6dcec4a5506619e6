"""Train CAST (Ke et al. 2022; F-CAST's vision tower, Sec. 3.1) and a ViT of equal width and depth on the same
shape-classification task, and print both test accuracies.

    accelerate launch --config_file examples/accelerate_configs/single.yaml examples/train_cast.py   # CPU, minutes
    torchrun --nproc_per_node 2 examples/train_cast.py --per_device_train_batch_size 32            # 2 processes

Task: the shape (circle, square, triangle, diamond, cross) of the most salient (largest) object of each synthetic
scene (`hf_longclip.data.synthetic`), 3-7 objects per image; chance is 20%. Both models see the same images,
normalisation, data order, optimiser and steps: CAST reads `num_segments` SEEDS superpixels (scaled from 196 at
224 px by default: 36 at 96 px), the ViT `(image_size / vit_patch_size)^2` patches (36 at 96 px with 16 px patches,
a ViT-B/16 shape), so both start from the same number of tokens. The image processor computes the superpixels in
the collate function, i.e. where the data loader runs.

Writes `<output_dir>/{cast,vit}/` checkpoints with their image processors (AutoModelForImageClassification and
AutoImageProcessor load both; CAST's with trust_remote_code=True), `results.json` (accuracies are those of the saved
checkpoints), `loss_curves.png`, `summary.json` (+ `.png`: --seeds) and `hierarchy.png`, CAST's fine-to-coarse
segmentations of test images (F-CAST Fig. 6). Two data-loader workers (`--dataloader_num_workers`) compute the
superpixels while the model trains. Seeds (`--seeds 0,1,2`), resume, LoRA and Hub push (with
`hf_longclip/recipes/cast/model_card.md`) as in train_himo.py.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path

from transformers import AutoModelForImageClassification

from hf_longclip import CASTForImageClassification
from hf_longclip.miniature import load_synthetic_scenes
from hf_longclip.recipes import (
    Run,
    method,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
)
from hf_longclip.recipes.cast import SHAPES, image_processor, plot_hierarchy

CAST = method("cast")
LOOP_DEFAULTS = dict(output_dir="outputs/cast", num_train_epochs=5.0, per_device_train_batch_size=64,
                     learning_rate=1e-3, weight_decay=0.05, warmup_steps=20, logging_steps=25,
                     dataloader_num_workers=2)
METRICS = ("test_accuracy",)


@dataclass
class ScriptArguments:
    models: str = field(default="cast,vit", metadata={"help": f"comma list of {list(CAST.variants)}"})
    image_size: int = field(default=96, metadata={"help": "image side in pixels (the scenes are rendered at it)"})
    num_segments: int | None = field(default=None, metadata={
        "help": "CAST's superpixels per image (default: 196 at 224 px, scaled with the image area)"})
    num_clusters: str = field(default="16,8,4", metadata={"help": "segments after each graph pooling"})
    superpixel_method: str = field(default="seeds", metadata={"help": "'seeds' (CAST's) or 'slic'"})
    hidden_size: int = field(default=64, metadata={"help": "width of both models"})
    num_attention_heads: int = field(default=4, metadata={"help": "attention heads of both models"})
    vit_patch_size: int = field(default=16, metadata={"help": "ViT patch side"})
    num_train: int = field(default=2000, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=500, metadata={"help": "synthetic test scenes"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes"})
    init_from_checkpoint: str | None = field(default=None, metadata={
        "help": "a CAST checkpoint (directory or Hub id: `hf-longclip convert cast` output, a CASTVisionModel or "
                "CASTForImageClassification) to fine-tune with a new classifier head, instead of a CAST from "
                "scratch; its configuration sets the model's shape and the superpixels (with --models cast)"})

    def __post_init__(self):
        self.model_list = [name.strip() for name in self.models.split(",") if name.strip()]
        unknown = sorted(set(self.model_list) - set(CAST.variants))
        if unknown or not self.model_list:
            raise ValueError(f"--models takes a comma list of {list(CAST.variants)}, got {self.models!r}")
        if self.init_from_checkpoint and self.model_list != ["cast"]:
            raise ValueError("--init_from_checkpoint fine-tunes a CAST checkpoint: pass --models cast")
        self.cluster_list = [int(n) for n in self.num_clusters.split(",")]


def run(started: Run, scenes, processor) -> dict[str, dict]:
    """One seed's run (`started.loop_args` are the seed's): both models trained, saved, reloaded and evaluated;
    CAST's segmentation figure; results."""
    args, loop_args, accelerator = started.script_args, started.loop_args, started.accelerator
    output_dir = Path(loop_args.output_dir)

    def build(name: str):
        return CAST.build_variant(name, args.init_from_checkpoint, processor, seed=loop_args.seed,
                                  image_size=args.image_size, hidden_size=args.hidden_size,
                                  num_attention_heads=args.num_attention_heads, num_clusters=args.cluster_list,
                                  vit_patch_size=args.vit_patch_size)

    def evaluate(model, image_processor):
        result = CAST.evaluate(model, image_processor, scenes["test"])
        if isinstance(model, CASTForImageClassification):
            plot_hierarchy(model, processor, scenes["test"], output_dir / "hierarchy.png")
        return result

    results, histories = train_variants(accelerator, args.model_list, build, evaluate, scenes, loop_args,
                                        started.lora_args, auto_class=AutoModelForImageClassification,
                                        run_args=started.run_args)
    publish(accelerator, results, histories, output_dir=output_dir, metrics=METRICS, card=CAST.card,
            hub_args=started.hub_args, run_args=started.run_args,
            push_variants=[name for name in args.model_list if name == "cast"])  # the ViT is only the baseline
    if accelerator.is_main_process:
        print(f"shape classification on {len(scenes['test'])} test scenes (chance {100 / len(SHAPES):.0f}%):")
        for name, result in results.items():
            print(f"  {name}: {result['test_accuracy']:.1f}% test accuracy, {result['parameters']:,} parameters, "
                  f"trained in {result['train_seconds']:.0f} s")
    return results


def main() -> None:
    started = start_run("train_cast", ScriptArguments, LOOP_DEFAULTS)
    args, accelerator = started.script_args, started.accelerator
    with accelerator.main_process_first():
        scenes = load_synthetic_scenes(seed=args.dataset_seed, num_train=args.num_train, num_test=args.num_test,
                                       num_validation=2, image_size=args.image_size)  # no validation split used
    warn_synthetic_fine_tuning(args.init_from_checkpoint, started.loop_args)
    processor = image_processor(args.init_from_checkpoint, args.image_size, args.num_segments,
                                args.superpixel_method)  # a checkpoint's: its resolution and superpixels
    run_over_seeds(accelerator, started.loop_args, started.hub_args,
                   lambda seed_args: run(replace(started, loop_args=seed_args), scenes, processor),
                   METRICS, title="train_cast: shape classification")
    accelerator.end_training()


if __name__ == "__main__":
    main()
