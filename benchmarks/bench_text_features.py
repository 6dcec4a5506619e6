"""`get_text_features` of HiMoCLIPModel against transformers' CLIPModel with the same weights: throughput ratio.

    python benchmarks/bench_text_features.py [--batch-size 256] [--repeats 10]
"""

import argparse

import torch
from common import clip_config, compare, random_batch
from transformers import CLIPModel

from hf_longclip import HiMoCLIPModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--text-length", type=int, default=248)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    clip = CLIPModel(clip_config()).eval()
    himo = HiMoCLIPModel.from_clip(clip, stretch_positions=False).eval()
    ids = random_batch(args.batch_size, args.text_length)["input_ids"]
    assert torch.equal(himo.get_text_features(ids).pooler_output, clip.get_text_features(ids).pooler_output)

    def run(model):
        with torch.inference_mode():
            model.get_text_features(ids)

    times = compare({"clip": lambda: run(clip), "himo": lambda: run(himo)}, repeats=args.repeats)
    print(f"device: cpu ({torch.get_num_threads()} threads), batch {args.batch_size} x {args.text_length} tokens")
    print(f"CLIPModel: {times['clip'] * 1e3:.1f} ms   HiMoCLIPModel: {times['himo'] * 1e3:.1f} ms")
    print(f"throughput ratio HiMo / CLIP: {times['clip'] / times['himo']:.3f}  (target >= 0.98)")


if __name__ == "__main__":
    main()
