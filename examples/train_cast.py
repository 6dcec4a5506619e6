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

from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate.utils import set_seed
from PIL.Image import Resampling
from transformers import (
    AutoModelForImageClassification,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessorPil,
)

from hf_longclip import CASTForImageClassification, CASTImageProcessor, CASTVisionConfig
from hf_longclip.recipes import (
    LoopArguments,
    load_synthetic_scenes,
    publish,
    run_over_seeds,
    start_run,
    train_variants,
    warn_synthetic_fine_tuning,
)
from hf_longclip.recipes.cast import (
    CARD,
    CLASSNAMES,
    SHAPES,
    ClassificationTask,
    ImageClassificationCollator,
    accuracy,
    plot_segment_hierarchies,
)

LOOP_DEFAULTS = dict(output_dir="outputs/cast", num_train_epochs=5.0, per_device_train_batch_size=64,
                     learning_rate=1e-3, weight_decay=0.05, warmup_steps=20, logging_steps=25,
                     dataloader_num_workers=2)
MODELS = ("cast", "vit")
METRICS = ("test_accuracy",)


@dataclass
class ScriptArguments:
    models: str = field(default="cast,vit", metadata={"help": f"comma list of {list(MODELS)}"})
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
        unknown = sorted(set(self.model_list) - set(MODELS))
        if unknown or not self.model_list:
            raise ValueError(f"--models takes a comma list of {list(MODELS)}, got {self.models!r}")
        if self.init_from_checkpoint and self.model_list != ["cast"]:
            raise ValueError("--init_from_checkpoint fine-tunes a CAST checkpoint: pass --models cast")
        self.cluster_list = [int(n) for n in self.num_clusters.split(",")]


def shape_label(row: dict) -> int:
    """Index in SHAPES of the most salient object's shape (the scene's class label is 'colour shape')."""
    return SHAPES.index(CLASSNAMES[row["label"]].split()[-1])


def build(name: str, args: ScriptArguments, processor: CASTImageProcessor):
    """(model, collate function) of `name`, both models with the same width, heads, depth and MLP ratio."""
    depth = len(args.cluster_list) + 1  # one block per CAST stage
    common = dict(hidden_size=args.hidden_size, num_attention_heads=args.num_attention_heads,
                  intermediate_size=4 * args.hidden_size, num_labels=len(SHAPES), hidden_act="gelu")
    if name == "cast" and args.init_from_checkpoint:
        model = CASTForImageClassification.from_pretrained(args.init_from_checkpoint, num_labels=len(SHAPES),
                                                           ignore_mismatched_sizes=True)  # a new head
    elif name == "cast":
        config = CASTVisionConfig(image_size=args.image_size, num_segments=processor.num_segments,
                                  depths=[1] * depth, num_clusters=args.cluster_list, **common)
        model = CASTForImageClassification(config)
    else:
        config = ViTConfig(image_size=args.image_size, patch_size=args.vit_patch_size, num_hidden_layers=depth,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)
        # ViT's own processor with CAST's resizing and normalisation: the same pixels, no superpixels to compute
        processor = ViTImageProcessorPil(size={"height": args.image_size, "width": args.image_size},
                                         resample=Resampling.BICUBIC, image_mean=processor.image_mean,
                                         image_std=processor.image_std)
        model = ViTForImageClassification(config)
    return model, ImageClassificationCollator(processor, shape_label, model_inputs(model))


def model_inputs(model) -> tuple[str, ...]:
    """What each classifier reads: CAST its superpixels too."""
    return ("pixel_values", "superpixels") if isinstance(model, CASTForImageClassification) else ("pixel_values",)


def run(args: ScriptArguments, loop_args: LoopArguments, lora_args, hub_args, accelerator, run_args: dict,
        scenes, processor: CASTImageProcessor) -> dict[str, dict]:
    """One seed's run: both models trained, saved, reloaded and evaluated; CAST's segmentation figure; results."""
    output_dir = Path(loop_args.output_dir)

    def build_task(name: str):
        set_seed(loop_args.seed)
        model, collate = build(name, args, processor)
        return ClassificationTask(model, collate), collate.image_processor

    def evaluate(model, image_processor):
        collate = ImageClassificationCollator(image_processor, shape_label, model_inputs(model))
        result = {"test_accuracy": accuracy(model, collate, scenes["test"]),
                  "parameters": sum(p.numel() for p in model.parameters())}
        if isinstance(model, CASTForImageClassification):
            plot_hierarchy(model, processor, scenes["test"], output_dir / "hierarchy.png")
        return result

    results, histories = train_variants(accelerator, args.model_list, build_task, evaluate, scenes, loop_args,
                                        lora_args, auto_class=AutoModelForImageClassification, run_args=run_args)
    publish(accelerator, results, histories, output_dir=output_dir, metrics=METRICS, card=CARD, hub_args=hub_args,
            run_args=run_args,
            push_variants=[name for name in args.model_list if name == "cast"])  # the ViT is only the baseline
    if accelerator.is_main_process:
        print(f"shape classification on {len(scenes['test'])} test scenes (chance {100 / len(SHAPES):.0f}%):")
        for name, result in results.items():
            print(f"  {name}: {result['test_accuracy']:.1f}% test accuracy, {result['parameters']:,} parameters, "
                  f"trained in {result['train_seconds']:.0f} s")
    return results


def main() -> None:
    args, _, loop_args, lora_args, hub_args, accelerator, run_args = start_run(
        "train_cast", ScriptArguments, LOOP_DEFAULTS, backbone=False)
    with accelerator.main_process_first():
        scenes = load_synthetic_scenes(seed=args.dataset_seed, num_train=args.num_train, num_test=args.num_test,
                                       num_validation=2, image_size=args.image_size)  # no validation split used
    warn_synthetic_fine_tuning(args.init_from_checkpoint, loop_args)
    if args.init_from_checkpoint:  # the checkpoint's resolution and superpixels
        config = CASTVisionConfig.from_pretrained(args.init_from_checkpoint)
        processor = CASTImageProcessor(size=config.image_size, num_segments=config.num_segments,
                                       superpixel_method=args.superpixel_method)
    else:
        processor = CASTImageProcessor(size=args.image_size, num_segments=args.num_segments,
                                       superpixel_method=args.superpixel_method)
    run_over_seeds(accelerator, loop_args, hub_args,
                   lambda seed_args: run(args, seed_args, lora_args, hub_args, accelerator, run_args, scenes,
                                         processor),
                   METRICS, title="train_cast: shape classification")
    accelerator.end_training()


@torch.no_grad()
def plot_hierarchy(model: CASTForImageClassification, processor: CASTImageProcessor, rows, path: Path,
                   count: int = 2) -> None:
    """CAST's segmentation of the first `count` test images at every level (superpixels, then each graph pooling),
    one row per image in one PNG."""
    model.eval()
    device = next(model.parameters()).device
    figure_rows = []
    for index in range(count):
        image = rows[index]["image"]
        inputs = processor([image])
        out = model.cast(inputs["pixel_values"].to(device), inputs["superpixels"].to(device))
        figure_rows.append((processor.crop(image), inputs["superpixels"][0], [a[0].cpu() for a in out.assignments]))
    plot_segment_hierarchies(figure_rows, path, title=f"CAST fine-to-coarse segments of {count} test images")

if __name__ == "__main__":
    main()
