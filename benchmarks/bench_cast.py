"""CAST's speed, as figures and ratios measured in one process (issue "CAST vision encoder", Speed):

1. superpixel preprocessing: milliseconds per 224 px image on one core for SEEDS (CAST's settings) and SLIC, on
   synthetic scenes and on a textured image; and whether two data-loader workers computing SEEDS keep up with a
   CPU training step of examples/train_cast.py's CAST (its default batch, image size and model);
2. CAST forward against a ViT-B/16-shaped model of equal width at 224 px (transformers' ViTModel, 768 wide,
   12 layers, 196 patches; CAST-B: 768 wide, blocks 3-3-3-2, graph pooling 196 -> 64 -> 32 -> 16): time ratio and
   FLOPs (`torch.utils.flop_counter.FlopCounterMode`: matrix products, convolutions and attention; the farthest
   point sampling loop is not counted); with `--device cuda`, the same in `--dtype bf16` (autocast).

    python benchmarks/bench_cast.py                      # CPU (~2 min on 2 cores)
    python benchmarks/bench_cast.py --json run.json      # the same, its figures and provenance written as JSON
    python benchmarks/bench_cast.py --device cuda --dtype bf16 --batch_size 64
"""

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import cv2
import numpy as np
import torch
from common import compare
from PIL import Image
from torch.utils.flop_counter import FlopCounterMode
from transformers import ViTConfig, ViTModel

from hf_longclip import CASTImageProcessor, CASTVisionConfig, CASTVisionModel
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.models.cast.image_processing_cast import compute_superpixels
from hf_longclip.recipes.cast import image_processor
from hf_longclip.training.provenance import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_cast  # its defaults are the training step measured here


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=8, help="images per forward in part 2")
    parser.add_argument("--images", type=int, default=24, help="images timed per superpixel method")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast")
    parser.add_argument("--json", type=Path, help="write the figures there, with the run's provenance")
    return parser.parse_args()


def textured(size: int, seed: int = 0) -> np.ndarray:
    """Smoothed colour noise: texture at several scales, harder for superpixels than flat shapes."""
    rng = np.random.default_rng(seed)
    noise = sum(cv2.resize(rng.random((size // s, size // s, 3)).astype(np.float32), (size, size))
                for s in (4, 16, 56))
    return (255 * noise / noise.max()).astype(np.uint8)


def superpixel_ms(images: list[np.ndarray], method: str, repeats: int) -> float:
    """Median over `repeats` passes of the milliseconds per image."""
    def one_pass():
        for image in images:
            compute_superpixels(image, 196, method)

    return 1000 * compare({method: one_pass}, repeats=repeats, warmup=1)[method] / len(images)


def training_step_seconds(scenes) -> tuple[float, float]:
    """Median seconds of one CAST training step of train_cast.py's defaults (forward, backward, AdamW) and of the
    collate function preparing its batch (crop, normalisation, SEEDS) on one core."""
    args, loop = train_cast.ScriptArguments(), train_cast.LOOP_DEFAULTS
    processor = image_processor(None, args.image_size, args.num_segments, args.superpixel_method)
    task, _ = train_cast.CAST.build_variant("cast", None, processor, image_size=args.image_size,
                                            hidden_size=args.hidden_size, num_attention_heads=args.num_attention_heads,
                                            num_clusters=args.cluster_list, vit_patch_size=args.vit_patch_size)
    model, collate = task.model, task.collate_fn
    rows = [scenes[i] for i in range(loop["per_device_train_batch_size"])]
    batch = collate(rows)
    optimizer = torch.optim.AdamW(model.parameters())

    def step():
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    times = compare({"step": step, "preprocessing": lambda: collate(rows)}, repeats=5)
    return times["step"], times["preprocessing"]


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    cv2.setNumThreads(1)
    print(f"torch threads: {torch.get_num_threads()}, device: {args.device}, dtype: {args.dtype}")

    # 1. superpixels, one core
    scenes = load_synthetic_scenes(seed=0, num_train=args.images, num_validation=2, num_test=2, image_size=224)
    scene_images = [np.asarray(image.convert("RGB")) for image in scenes["train"]["image"]]
    texture_images = [textured(224, seed) for seed in range(args.images)]
    print("\n1. superpixels, 196 per 224 px image, one core (ms per image)")
    superpixels = {}
    for method in ("seeds", "slic"):
        superpixels[method] = {"synthetic_scene": superpixel_ms(scene_images, method, args.repeats),
                               "textured_image": superpixel_ms(texture_images, method, args.repeats)}
        print(f"   {method:5s}  scenes {superpixels[method]['synthetic_scene']:6.1f}   "
              f"textured {superpixels[method]['textured_image']:6.1f}")
    small = load_synthetic_scenes(seed=0, num_train=64, num_validation=2, num_test=2,
                                  image_size=train_cast.ScriptArguments().image_size)
    step, preprocessing = training_step_seconds(small["train"])
    print(f"   train_cast.py (96 px, 36 SEEDS superpixels, batch 64): training step {step:.3f} s; the batch's "
          f"preprocessing {preprocessing:.3f} s on one core, {preprocessing / 2:.3f} s in two workers: "
          f"{'keeps up' if preprocessing / 2 <= step else 'does NOT keep up'} "
          f"(ratio {preprocessing / 2 / step:.2f})")

    # 2. CAST-B vs ViT-B/16 forward at 224 px
    device = torch.device(args.device)
    cast = CASTVisionModel(CASTVisionConfig()).to(device).eval()
    vit = ViTModel(ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                             image_size=224, patch_size=16), add_pooling_layer=False).to(device).eval()
    processor = CASTImageProcessor()
    images = [Image.fromarray(image) for image in (scene_images + texture_images)[: args.batch_size]]
    inputs = {key: value.to(device) for key, value in processor(images).items()}
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bf16" else nullcontext())

    def run(model, **kwargs):
        def call():
            with torch.no_grad(), autocast:
                model(**kwargs)
            if device.type == "cuda":
                torch.cuda.synchronize()
        return call

    times = compare({"cast": run(cast, **inputs), "vit": run(vit, pixel_values=inputs["pixel_values"])},
                    repeats=args.repeats, warmup=1)
    flops = {}
    for name, call in (("cast", run(cast, **inputs)), ("vit", run(vit, pixel_values=inputs["pixel_values"]))):
        with FlopCounterMode(display=False) as counter:
            call()
        flops[name] = counter.get_total_flops() / args.batch_size
    params = {name: sum(p.numel() for p in model.parameters()) for name, model in (("cast", cast), ("vit", vit))}
    print(f"\n2. forward at 224 px, batch {args.batch_size} ({args.dtype}, {args.device})")
    for name in ("cast", "vit"):
        print(f"   {name:4s}  {1000 * times[name] / args.batch_size:7.1f} ms/image   "
              f"{flops[name] / 1e9:6.1f} GFLOPs/image   {params[name] / 1e6:6.1f} M parameters")
    print(f"   CAST / ViT-B/16: time x{times['cast'] / times['vit']:.2f}, FLOPs x{flops['cast'] / flops['vit']:.2f}")
    if args.json:
        forward = {name: {"ms_per_image": 1000 * times[name] / args.batch_size, "gflops_per_image": flops[name] / 1e9,
                          "parameters_millions": params[name] / 1e6} for name in ("cast", "vit")}
        figures = {
            "superpixels_ms_per_image_196_at_224px_one_core": superpixels,
            "keeping_up_with_training": {"preprocessing_seconds_one_core": preprocessing,
                                         "preprocessing_seconds_two_workers": preprocessing / 2,
                                         "cast_training_step_seconds": step,
                                         "ratio_preprocessing_over_step": preprocessing / 2 / step},
            f"forward_224px_batch{args.batch_size}_{args.dtype}": {
                **forward, "time_ratio": times["cast"] / times["vit"], "flops_ratio": flops["cast"] / flops["vit"]},
        }
        args.json.write_text(json.dumps({**figures, "provenance": provenance(dtype=args.dtype)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
