"""Train F-CAST from scratch on the synthetic scenes and print a miniature of its Table 5 (two-level loss vs no
part-level alignment), with grounding measured on the scenes' boxes and drawn like Fig. 7.

    accelerate launch examples/train_fcast.py                                  # CPU, minutes
    torchrun --nproc_per_node 2 examples/train_fcast.py --per_device_train_batch_size 16   # 2 processes

Variants, trained identically (same initialisation, data order, sub-captions, optimiser and steps):
  fcast          F-CAST: CAST + hierarchical text encoder, L = L_part + L_whole (Eq. 7-8)
  fcast-no-part  F-CAST without the part-level loss (Table 5's "w/o Part alignment"; LoTLIP-style whole level only)
Batches hold B images with K sub-captions each (`--num_sub_captions`; the first N = 4 are the random chunks of the
long caption, App. C). Evaluation on the test scenes: R@1 both ways with the long captions (balanced chunking), and
within the hard-negative pairs whose captions differ only after token 77 (chance 50). Grounding: every object
sentence of a test scene names one object whose box is known; its AttnPool attention (Eq. 6) is carried to the
pixels (per superpixel, spread over its area): the pointing game (is the attention peak inside the box?) and the
attention mass inside the box, against the box's share of the image (what a uniform map scores).

Writes `<output_dir>/<variant>/` checkpoints (AutoModel/AutoProcessor with trust_remote_code=True), `results.json`
and `grounding.png` (three sub-captions per image, head-averaged attention, F-CAST's model).
"""

import json
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import set_seed
from transformers import AutoModel, AutoProcessor, HfArgumentParser

from hf_longclip import CASTImageProcessor, FCASTConfig, FCASTModel, FCASTProcessor
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.data.tokenizer import scene_corpus, train_scene_tokenizer
from hf_longclip.evaluation import evaluate_text_lengths, late_difference_pairs
from hf_longclip.training.fcast_task import FCASTCollator, FCASTTask
from hf_longclip.training.loop import (
    LoopArguments,
    make_accelerator,
    save_model,
    train,
    whole_model_init,
)

VARIANTS = {"fcast": 1.0, "fcast-no-part": 0.0}  # name: weight of L_part
CHUNK_TOKENS = 77
FIGURE_ROWS = (0, 2, 4)  # test scenes of three different hard-negative groups (rows 2g and 2g + 1 share one)
LOOP_DEFAULTS = dict(output_dir="outputs/fcast", max_steps=400, per_device_train_batch_size=32,
                     learning_rate=1e-3, weight_decay=0.05, warmup_steps=25, logging_steps=25,
                     dataloader_num_workers=1)


@dataclass
class ScriptArguments:
    variants: str = field(default=",".join(VARIANTS), metadata={"help": f"comma list of {list(VARIANTS)}"})
    image_size: int = field(default=64, metadata={"help": "image side in pixels (scenes rendered at it)"})
    num_segments: int = field(default=49, metadata={"help": "CAST's superpixels per image"})
    num_clusters: str = field(default="16,8", metadata={"help": "segments after each graph pooling; F-CAST grounds "
                                                               "sub-captions in the second stage's (the first entry)"})
    hidden_size: int = field(default=64, metadata={"help": "width of both towers and of the joint space"})
    stage1_layers: int = field(default=2, metadata={"help": "L1 (the paper's 8)"})
    stage2_layers: int = field(default=1, metadata={"help": "L2 (the paper's 4)"})
    num_sub_captions: int = field(default=6, metadata={"help": "K sub-captions per image (the paper's 8)"})
    num_train: int = field(default=3000, metadata={"help": "synthetic training scenes"})
    num_test: int = field(default=300, metadata={"help": "synthetic test scenes"})
    grounding_images: int = field(default=100, metadata={"help": "test scenes whose object sentences are grounded"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the synthetic scenes"})

    def __post_init__(self):
        self.variant_list = [name.strip() for name in self.variants.split(",") if name.strip()]
        if not self.variant_list or set(self.variant_list) - set(VARIANTS):
            raise ValueError(f"--variants takes a comma list of {list(VARIANTS)}, got {self.variants!r}")
        self.cluster_list = [int(n) for n in self.num_clusters.split(",")]


def build(variant: str, args: ScriptArguments, processor: FCASTProcessor) -> FCASTModel:
    tokenizer, width = processor.tokenizer, args.hidden_size
    text = dict(vocab_size=len(tokenizer), hidden_size=width, intermediate_size=4 * width, num_attention_heads=4,
                num_hidden_layers=args.stage1_layers, num_stage2_layers=args.stage2_layers,
                max_position_embeddings=CHUNK_TOKENS, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    vision = dict(hidden_size=width, num_attention_heads=4, intermediate_size=4 * width, image_size=args.image_size,
                  num_segments=args.num_segments, depths=[1] * (len(args.cluster_list) + 1),
                  num_clusters=args.cluster_list)
    return FCASTModel(FCASTConfig(text_config=text, vision_config=vision, projection_dim=width, pool_heads=4,
                                  part_loss_weight=VARIANTS[variant]))


def attention_density(pixel_attention: torch.Tensor, superpixels: torch.Tensor) -> torch.Tensor:
    """(Q, H, W) maps summing to one: each superpixel's attention spread evenly over its pixels."""
    area = torch.bincount(superpixels.flatten()).float()
    return pixel_attention / area[superpixels][None]


@torch.no_grad()
def grounding_scores(model: FCASTModel, processor: FCASTProcessor, rows) -> dict:
    """Pointing game and attention mass in the box over every object sentence of `rows` (sentence m + 1 names the
    object of box m), with the boxes' mean share of the image (a uniform map's mass) for reference."""
    model.eval()
    hits, masses, shares = [], [], []
    for row in rows:
        objects = row["sentences"][1:]
        inputs = processor(text=[objects], images=[row["image"]], padding="longest").to(model.device)
        out = model.get_grounding(inputs["pixel_values"], inputs["superpixels"], inputs["input_ids"],
                                  inputs["attention_mask"])
        density = attention_density(out.pixel_attention[0].cpu(), inputs["superpixels"][0].cpu())
        size = density.shape[-1]
        for m, box in enumerate(row["boxes"]):
            x0, y0, x1, y1 = (min(size, max(0, round(v * size))) for v in box)
            inside = torch.zeros(size, size, dtype=torch.bool)
            inside[y0:y1, x0:x1] = True
            peak = int(density[m].argmax())
            hits.append(bool(inside.flatten()[peak]))
            masses.append(float(density[m][inside].sum()))
            shares.append(float(inside.float().mean()))
    return {"pointing_game": 100 * float(np.mean(hits)), "box_mass": 100 * float(np.mean(masses)),
            "uniform_box_mass": 100 * float(np.mean(shares)), "num_sentences": len(hits)}


@torch.no_grad()
def plot_grounding(model: FCASTModel, processor: FCASTProcessor, rows, path: Path) -> None:
    """Fig. 7's layout: each image, then the attention maps of three of its object sentences."""
    from hf_longclip.plots import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(len(rows), 4, figsize=(10, 3.0 * len(rows)), squeeze=False)
    for ax_row, row in zip(axes, rows):
        subs = row["sentences"][1:4]
        inputs = processor(text=[subs], images=[row["image"]], padding="longest").to(model.device)
        out = model.get_grounding(inputs["pixel_values"], inputs["superpixels"], inputs["input_ids"],
                                  inputs["attention_mask"])
        density = attention_density(out.pixel_attention[0].cpu(), inputs["superpixels"][0].cpu())
        crop = processor.image_processor.crop(row["image"])
        ax_row[0].imshow(crop)
        ax_row[0].set_title("image", fontsize=8)
        for ax, sub, heat, box in zip(ax_row[1:], subs, density, row["boxes"]):
            ax.imshow(crop)
            ax.imshow(heat.numpy(), cmap="jet", alpha=0.55)
            size = crop.shape[0]
            ax.add_patch(plt.Rectangle((box[0] * size, box[1] * size), (box[2] - box[0]) * size,
                                       (box[3] - box[1]) * size, fill=False, edgecolor="white", linewidth=1.5))
            ax.set_title(textwrap.fill(sub, 38), fontsize=6.5)
        for ax in ax_row:
            ax.axis("off")
    fig.suptitle("F-CAST AttnPool attention per sub-caption (white: the named object's box)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = HfArgumentParser((ScriptArguments, LoopArguments))
    parser.set_defaults(**LOOP_DEFAULTS)
    args, loop_args = parser.parse_args_into_dataclasses()
    accelerator = make_accelerator(loop_args)
    with accelerator.main_process_first():
        scenes = load_synthetic_scenes(seed=args.dataset_seed, num_train=args.num_train, num_test=args.num_test,
                                       num_validation=2, image_size=args.image_size)
    tokenizer = train_scene_tokenizer(scene_corpus(scenes), model_max_length=CHUNK_TOKENS)
    processor = FCASTProcessor(CASTImageProcessor(size=args.image_size, num_segments=args.num_segments), tokenizer,
                               max_length=CHUNK_TOKENS)
    test, output_dir = scenes["test"], Path(loop_args.output_dir)
    pairs = late_difference_pairs(test, tokenizer, CHUNK_TOKENS)
    results = {}
    for variant in args.variant_list:
        set_seed(loop_args.seed)
        with whole_model_init(accelerator):
            model = build(variant, args, processor)
        collate = FCASTCollator(processor, args.num_sub_captions, seed=loop_args.seed)
        start = time.perf_counter()
        trained, history = train(FCASTTask(model, collate), scenes["train"], loop_args, accelerator, run_name=variant)
        seconds = time.perf_counter() - start
        save_model(accelerator, trained, output_dir / variant, processor)
        if accelerator.is_main_process:  # evaluate what was saved, loaded as a user would
            with whole_model_init(accelerator):
                saved = AutoModel.from_pretrained(output_dir / variant, trust_remote_code=True).to(accelerator.device)
            saved_processor = AutoProcessor.from_pretrained(output_dir / variant, trust_remote_code=True)
            results[variant] = {
                **evaluate_text_lengths(saved, saved_processor, test, pairs, loop_args.per_device_eval_batch_size),
                **grounding_scores(saved, saved_processor, test.select(range(min(args.grounding_images, len(test))))),
                "train_seconds": round(seconds, 1), "final_loss": history[-1]["loss"]}
            if variant == "fcast":
                plot_grounding(saved, saved_processor, [test[i] for i in FIGURE_ROWS], output_dir / "grounding.png")
        accelerator.wait_for_everyone()
        accelerator.free_memory()
    if accelerator.is_main_process:
        (output_dir / "results.json").write_text(json.dumps(
            {"results": results, "script": asdict(args), "loop": asdict(loop_args)}, indent=2, default=str))
        print(f"\nF-CAST miniature ({len(test)} test scenes; {len(pairs)} hard pairs differ only after token "
              f"{CHUNK_TOKENS}, chance 50; grounding over object sentences, uniform-map box mass "
              f"{next(iter(results.values()))['uniform_box_mass']:.1f}%):")
        print(f"{'variant':<15}{'R@1 I2T':>9}{'R@1 T2I':>9}{'hard I2T':>10}{'hard T2I':>10}{'pointing':>10}"
              f"{'box mass':>10}{'train s':>9}")
        for variant, r in results.items():
            print(f"{variant:<15}{r['r1_i2t']:>9.1f}{r['r1_t2i']:>9.1f}{r['hard_r1_i2t']:>10.1f}"
                  f"{r['hard_r1_t2i']:>10.1f}{r['pointing_game']:>10.1f}{r['box_mass']:>10.1f}"
                  f"{r['train_seconds']:>9.0f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
