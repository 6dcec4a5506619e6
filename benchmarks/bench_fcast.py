"""F-CAST's costs, measured in one process. Time ratios are medians of interleaved runs, FLOP ratios come from
`torch.utils.flop_counter.FlopCounterMode` (matrix products and attention).

Text encoding (App. C's efficiency claim, goal < 1): a 248-token caption encoded hierarchically as N = 4 chunks of
62 tokens (stage 1: 8 blocks over each chunk, one packed batch; adapter; stage 2: 4 blocks over [CLS] + 4 chunk
embeddings) against the flat CLIP text encoder of the same width and total depth (12 blocks over 248 tokens,
transformers' CLIPTextModel).

Training step (`--step`): one AdamW step of F-CAST (CAST-B's stages 3-3-3-2, 196 -> 64 -> 32 -> 16 segments;
hierarchical text 8 + 4 blocks; two-level loss) against one of FLAIR (a 12-block ViT/16 and CLIP's flat 12-block text
encoder, FLAIR's flat loss) of the same width, on B images with K = 8 sub-captions of 77 tokens each, 224 px.

    python benchmarks/bench_fcast.py                                   # CPU, CLIP's width (512), batch 8
    python benchmarks/bench_fcast.py --device cuda --dtype bf16 --batch_size 64
    python benchmarks/bench_fcast.py --step --width 256 --batch_size 8  # CPU
    python benchmarks/bench_fcast.py --step --width 768 --batch_size 64 --device cuda --dtype bf16
"""

import argparse
from contextlib import nullcontext

import torch
from common import compare
from torch.utils.flop_counter import FlopCounterMode
from transformers import CLIPTextConfig, CLIPTextModel

from hf_longclip import FCASTConfig, FCASTModel
from hf_longclip.recipes.fcast.task import FCASTTask

TOKENS, CHUNKS = 248, 4
SUB_CAPTIONS, SUB_TOKENS, IMAGE, PATCH = 8, 77, 224, 16


def text_config(args) -> dict:
    return dict(vocab_size=1000, hidden_size=args.width, intermediate_size=4 * args.width,
                num_attention_heads=args.heads, bos_token_id=0, eos_token_id=1, pad_token_id=2)


def counted_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def bench_step(args, autocast) -> None:
    """One training step of F-CAST against one of FLAIR, same width, heads, batch and sub-captions."""
    tower = dict(hidden_size=args.width, num_attention_heads=args.heads, intermediate_size=4 * args.width,
                 image_size=IMAGE)
    models = {
        "flair": FCASTModel(FCASTConfig(
            text_config=dict(text_config(args), num_hidden_layers=12, num_stage2_layers=0, num_chunks=1),
            vision_config=dict(tower, num_hidden_layers=12, patch_size=PATCH), vision_backbone="vit",
            projection_dim=args.width, pool_heads=args.heads)),
        "fcast": FCASTModel(FCASTConfig(
            text_config=dict(text_config(args), num_hidden_layers=8, num_stage2_layers=4, num_chunks=CHUNKS),
            vision_config=dict(tower, num_segments=(IMAGE // PATCH) ** 2), projection_dim=args.width,
            pool_heads=args.heads)),
    }
    # each model's training objective is its task's (FLAIR's flat loss freezes the part level's scale and bias)
    tasks = {name: FCASTTask(model, None, objective=name) for name, model in models.items()}
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (args.batch_size, SUB_CAPTIONS, SUB_TOKENS), generator=generator)
    ids[..., 0], ids[..., -1] = 0, 1
    grid = torch.arange(IMAGE, device=args.device) // PATCH  # 196 square superpixels: CAST's token count
    inputs = dict(input_ids=ids.to(args.device),
                  pixel_values=torch.randn(args.batch_size, 3, IMAGE, IMAGE, generator=generator).to(args.device),
                  superpixels=(grid[:, None] * (IMAGE // PATCH) + grid[None]).expand(args.batch_size, -1, -1))
    steps = {}
    for name, model in models.items():
        model.to(args.device).train()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

        def step(model=model, optimizer=optimizer, task=tasks[name]):
            with autocast:
                loss = sum(task.compute_loss(model, inputs).values())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        steps[name] = step
    flops = {name: counted_flops(step) for name, step in steps.items()}
    times = compare(steps, repeats=args.repeats)
    print(f"one training step: batch {args.batch_size} images x {SUB_CAPTIONS} sub-captions of {SUB_TOKENS} tokens, "
          f"{IMAGE} px, width {args.width}, {args.device} {args.dtype}")
    for name, label in (("flair", "FLAIR (ViT/16 12 blocks, flat text 12 blocks, flat loss)"),
                        ("fcast", "F-CAST (CAST 3-3-3-2, text 8 + 4 blocks, two-level loss)")):
        parameters = sum(p.numel() for p in models[name].parameters()) / 1e6
        print(f"  {label}: {1000 * times[name]:.0f} ms, {flops[name] / 1e9:.1f} GFLOP, {parameters:.1f} M parameters")
    print(f"  ratios F-CAST / FLAIR: time {times['fcast'] / times['flair']:.2f}, "
          f"FLOPs {flops['fcast'] / flops['flair']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", action="store_true", help="time a training step of F-CAST against FLAIR's")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.manual_seed(0)
    autocast = torch.autocast(args.device, torch.bfloat16) if args.dtype == "bf16" else nullcontext()
    if args.step:
        return bench_step(args, autocast)
    common = text_config(args)
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

    def run_flat():
        with torch.no_grad(), autocast:
            flat(input_ids=ids)

    def run_hierarchical():
        with torch.no_grad(), autocast:
            fcast.get_text_features(chunks)

    flops = {name: counted_flops(fn) for name, fn in (("flat", run_flat), ("hierarchical", run_hierarchical))}
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
