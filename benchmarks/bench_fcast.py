"""F-CAST's efficiency claim (App. C), measured in one process: a 248-token caption encoded hierarchically as N = 4
chunks of 62 tokens (stage 1: 8 blocks over each chunk, one packed batch; adapter; stage 2: 4 blocks over [CLS] +
4 chunk embeddings) against the flat CLIP text encoder of the same width and total depth (12 blocks over 248
tokens, transformers' CLIPTextModel). Time ratio (median of interleaved runs) and FLOP ratio
(`torch.utils.flop_counter.FlopCounterMode`: matrix products and attention); goal < 1.

    python benchmarks/bench_fcast.py                                   # CPU, CLIP's width (512), batch 8
    python benchmarks/bench_fcast.py --device cuda --dtype bf16 --batch_size 64
"""

import argparse
from contextlib import nullcontext

import torch
from common import compare
from torch.utils.flop_counter import FlopCounterMode
from transformers import CLIPTextConfig, CLIPTextModel

from hf_longclip import FCASTConfig, FCASTModel

TOKENS, CHUNKS = 248, 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.manual_seed(0)
    common = dict(vocab_size=1000, hidden_size=args.width, intermediate_size=4 * args.width,
                  num_attention_heads=args.heads, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    flat = CLIPTextModel(CLIPTextConfig(num_hidden_layers=12, max_position_embeddings=TOKENS, **common))
    fcast = FCASTModel(FCASTConfig(
        text_config=dict(num_hidden_layers=8, num_stage2_layers=4, num_chunks=CHUNKS, max_position_embeddings=77,
                         **common),
        vision_config=dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=32,
                           num_segments=16, depths=[1, 1], num_clusters=[4]),
        projection_dim=args.width))
    flat, fcast = flat.to(args.device).eval(), fcast.to(args.device).eval()
    ids = torch.randint(3, 1000, (args.batch_size, TOKENS), device=args.device)
    ids[:, 0], ids[:, -1] = 0, 1
    chunk = TOKENS // CHUNKS
    chunks = torch.randint(3, 1000, (args.batch_size, CHUNKS, chunk), device=args.device)
    chunks[..., 0], chunks[..., -1] = 0, 1
    autocast = torch.autocast(args.device, torch.bfloat16) if args.dtype == "bf16" else nullcontext()

    def run_flat():
        with torch.no_grad(), autocast:
            flat(input_ids=ids)

    def run_hierarchical():
        with torch.no_grad(), autocast:
            fcast.get_text_features(chunks)

    flops = {}
    for name, fn in (("flat", run_flat), ("hierarchical", run_hierarchical)):
        with FlopCounterMode(display=False) as counter:
            fn()
        flops[name] = counter.get_total_flops()
    times = compare({"flat": run_flat, "hierarchical": run_hierarchical}, repeats=args.repeats)
    print(f"{TOKENS}-token caption, width {args.width}, batch {args.batch_size}, {args.device} {args.dtype}")
    print(f"  flat CLIP text encoder (12 blocks x {TOKENS} tokens): {1000 * times['flat']:.1f} ms, "
          f"{flops['flat'] / 1e9:.2f} GFLOP")
    print(f"  hierarchical ({CHUNKS} x {chunk} tokens, 8 + 4 blocks): {1000 * times['hierarchical']:.1f} ms, "
          f"{flops['hierarchical'] / 1e9:.2f} GFLOP")
    print(f"  ratios hierarchical / flat: time {times['hierarchical'] / times['flat']:.2f}, "
          f"FLOPs {flops['hierarchical'] / flops['flat']:.2f}")


if __name__ == "__main__":
    main()
