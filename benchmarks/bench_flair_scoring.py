"""FLAIR's retrieval scoring modes (`hf_longclip.evaluation.scoring`): pairs scored per second by each, and the
time of a COCO-sized run (1,000 images x 5,000 captions) extrapolated from them.

    global            the global cosines of an image batch against every text (one matrix product)
    conditioned       every pair pooled by FLAIR's attention pooling (`pooled_scores`, blocks of --pairs_per_chunk)
    conditioned-topk  the global cosines, each image's top --topk texts, those pairs pooled

At FLAIR's sizes (ViT-B/16: 196 patch tokens, 512-wide projection, the pooling's 8 heads), random tokens and texts:
the towers are left out, as their cost (each image and text encoded once) is the same in every mode. The ranking of
the full score matrix (`score_matrix_retrieval`, 1,000 x 5,000) is timed once on its own.

    python benchmarks/bench_flair_scoring.py                      # CPU, fp32
    python benchmarks/bench_flair_scoring.py --device cuda --dtype bf16 --images 256
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from common import compare

from hf_longclip.evaluation.scoring import PAIRS_PER_CHUNK, pooled_scores, score_matrix_retrieval
from hf_longclip.models.fcast.pooling import AttentionPool

TOKENS, WIDTH, HEADS = 196, 512, 8  # FLAIR's ViT-B/16 patch tokens, projection width, pooling heads
COCO_IMAGES, COCO_TEXTS = 1000, 5000


class Pooling(torch.nn.Module):
    """What `pooled_scores` reads of a model: FLAIR's pooling block (value norm, zero key)."""

    def __init__(self):
        super().__init__()
        self.grounding_pool = AttentionPool(WIDTH, HEADS, WIDTH, value_norm=True, zero_attention=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=8, help="images scored per timed call (default 8)")
    parser.add_argument("--texts", type=int, default=COCO_TEXTS, help="texts (default 5000)")
    parser.add_argument("--topk", type=int, default=128, help="texts re-scored per image (default 128)")
    parser.add_argument("--pairs_per_chunk", type=int, default=PAIRS_PER_CHUNK, help="pairs pooled at once "
                        f"(default {PAIRS_PER_CHUNK})")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, median (default 3)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="autocast dtype (default fp32)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall: elapsed seconds; cpu: the "
                        "process's CPU seconds divided by its threads, which other jobs on a shared machine inflate "
                        "less (default wall)")
    parser.add_argument("--output", help="write the figures as JSON here (default: print only)")
    args = parser.parse_args()

    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    model = Pooling().to(device).eval()
    tokens = torch.randn(args.images, TOKENS, WIDTH, generator=generator).to(device)
    global_images = F.normalize(torch.randn(args.images, WIDTH, generator=generator), dim=-1).to(device)
    queries = torch.randn(args.texts, WIDTH, generator=generator).to(device)
    units = F.normalize(queries, dim=-1)
    every = torch.arange(args.texts, device=device).expand(args.images, -1)
    threads = torch.get_num_threads()
    clock = time.perf_counter if args.clock == "wall" else (lambda: time.process_time() / threads)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def synchronized(fn):
        def call():
            with torch.no_grad(), autocast:
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        return call

    def topk_scores():
        index = (global_images @ units.T).topk(args.topk, dim=-1).indices
        pooled_scores(model, tokens, None, queries, units, index, args.pairs_per_chunk)

    seconds = compare({
        "global": synchronized(lambda: global_images @ units.T),
        "conditioned": synchronized(lambda: pooled_scores(model, tokens, None, queries, units, every,
                                                          args.pairs_per_chunk)),
        "conditioned-topk": synchronized(topk_scores),
    }, repeats=args.rounds, warmup=1, clock=clock)
    pairs = {"global": args.images * args.texts, "conditioned": args.images * args.texts,
             "conditioned-topk": args.images * args.topk}
    modes = {}
    for mode, time_s in seconds.items():
        per_image = time_s / args.images
        modes[mode] = {"seconds_per_call": time_s, "pairs_pooled_per_call": 0 if mode == "global" else pairs[mode],
                       "pairs_per_s": pairs[mode] / time_s,
                       f"coco_{COCO_IMAGES}x{COCO_TEXTS}_extrapolated_s": per_image * COCO_IMAGES * COCO_TEXTS
                       / args.texts if mode != "conditioned-topk" else per_image * COCO_IMAGES}

    scores = torch.randn(COCO_IMAGES, COCO_TEXTS, generator=generator)
    start = clock()
    score_matrix_retrieval(scores, torch.arange(COCO_TEXTS) // (COCO_TEXTS // COCO_IMAGES))
    ranking_s = clock() - start
    result = {"script": "benchmarks/bench_flair_scoring.py", "device": str(device), "dtype": args.dtype,
              "clock": args.clock, "threads": threads, "load_average_1min": os.getloadavg()[0],
              "sizes": {"tokens": TOKENS, "width": WIDTH, "heads": HEADS, "images_per_call": args.images,
                        "texts": args.texts, "topk": args.topk, "pairs_per_chunk": args.pairs_per_chunk},
              "modes": modes, f"ranking_{COCO_IMAGES}x{COCO_TEXTS}_s": ranking_s}
    print(json.dumps(result, indent=2))
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
