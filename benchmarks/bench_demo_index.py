"""`hf-longclip demo`'s image embedding pass: images per second of `build_index` over a folder of PNG files (read,
preprocess, encode, written to the safetensors cache) against `encode_images` on the same images already decoded
(the model alone, the baseline), and the time of a second pass served from the cache, at HiMo-CLIP's default sizes
(CLIP ViT-B/32, random weights: speed does not depend on them), 224 px synthetic scenes.

    python benchmarks/bench_demo_index.py                  # wall clock
    python benchmarks/bench_demo_index.py --clock cpu      # CPU seconds of this process (a shared machine's load aside)
"""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from common import compare
from PIL import Image
from transformers import CLIPImageProcessor

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.demo.index import build_index
from hf_longclip.evaluation.encoding import encode_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=64, help="images in the folder")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--output", type=Path, default=Path("docs/benchmarks/demo_index.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = HiMoCLIPModel(HiMoCLIPConfig()).eval()
    image_processor = CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
    workdir = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    scenes = load_synthetic_scenes(cache_dir=str(workdir / "datasets"), image_size=224, num_train=2,
                                   num_validation=2, num_test=args.images)["test"]
    folder = workdir / "images"
    folder.mkdir()
    for index, row in enumerate(scenes):
        row["image"].save(folder / f"{index:05d}.png")
    decoded = [Image.open(path).convert("RGB") for path in sorted(folder.glob("*.png"))]
    processor = _ImagesOnly(image_processor)
    cached = workdir / "cached"
    build_index(model, processor, folder, cached, args.batch_size, progress=False)

    def first_pass():
        shutil.rmtree(workdir / "cache", ignore_errors=True)
        build_index(model, processor, folder, workdir / "cache", args.batch_size, progress=False)

    candidates = {
        "encode_decoded": lambda: encode_images(model, processor, decoded, args.batch_size),
        "index_first_pass": first_pass,
        "index_cached": lambda: build_index(model, processor, folder, cached, args.batch_size, progress=False),
    }
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    seconds = compare(candidates, args.repeats, warmup=1, clock=clock)
    result = {
        "date": time.strftime("%Y-%m-%d"), "clock": args.clock, "threads": args.threads, "images": args.images,
        "image_size": 224, "model": "HiMoCLIPModel(HiMoCLIPConfig()): CLIP ViT-B/32 sizes",
        "batch_size": args.batch_size, "seconds": seconds,
        "images_per_second": {name: args.images / value for name, value in seconds.items()},
        "first_pass_over_encode_decoded": seconds["index_first_pass"] / seconds["encode_decoded"],
        "cached_over_first_pass": seconds["index_cached"] / seconds["index_first_pass"],
    }
    print(json.dumps(result, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(workdir)


class _ImagesOnly:
    """A processor for images alone (no tokenizer needed to embed images)."""

    def __init__(self, image_processor):
        self.image_processor = image_processor

    def __call__(self, images, return_tensors="pt"):
        return self.image_processor(images=images, return_tensors=return_tensors)


if __name__ == "__main__":
    main()
