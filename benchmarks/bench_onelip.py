"""OneLIP's speed, as ratios measured in one process (issue "OneLIP end to end", Speed):

1. text-feature throughput of OneLIP's RoPE text encoder against transformers' CLIP text encoder of the same size,
   both at `--text_length` (248) tokens (goal >= 0.9);
2. one OneLIP training step (frozen teacher forward + TRIM + the three losses of Eq. 10, forward, backward and
   AdamW step) against one CLIP-248 step with the global InfoNCE only, on the same batch (goal <= 1.5), and the
   share of TRIM-Select's decomposition (I(i), Eq. 4) in the OneLIP step, exact and by subspace iteration;
3. with `--device cuda`: the same in `--dtype bf16` (autocast) and the model FLOP utilisation (MFU) of each step,
   FLOPs counted by `torch.utils.flop_counter.FlopCounterMode` (forward + backward, teacher included) against
   `--peak_tflops` (H100 SXM bf16 dense: 989).

    python benchmarks/bench_onelip.py                                   # CPU, small model, batch 256 (~1.5 min)
    python benchmarks/bench_onelip.py --vit_b16 --device cuda --dtype bf16 --batch_size 256
    python benchmarks/bench_onelip.py --text_only --text_width 512 --text_layers 12 --text_heads 8 --batch_size 16
                                                                        # 1. only, at ViT-B/16's text tower size

Default sizes are train_onelip.py's from-scratch model (64 wide, 2 layers, 64 px images, patch 8);
`--vit_b16` is CLIP ViT-B/16 (text 512 x 12 layers, vision 768 x 12 layers, 224 px, patch 16, 49,408 tokens).
"""

import argparse
from contextlib import nullcontext

import torch
from common import compare, random_batch
from transformers import CLIPConfig, CLIPModel

from hf_longclip import HiMoCLIPModel, OneLIPForPreTraining
from hf_longclip.objectives.onelip import trim_scores
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.recipes.onelip.task import OneLIPTask

VIT_B16 = dict(text_width=512, text_layers=12, text_heads=8, vision_width=768, vision_layers=12, vision_heads=12,
               image_size=224, patch_size=16, projection_dim=512, vocab_size=49408)


def base_config(args) -> CLIPConfig:
    """A 77-token CLIP of the chosen size (the base encoder OneLIP adapts)."""
    return CLIPConfig(
        text_config=dict(hidden_size=args.text_width, intermediate_size=4 * args.text_width,
                         num_hidden_layers=args.text_layers, num_attention_heads=args.text_heads,
                         vocab_size=args.vocab_size, max_position_embeddings=77, bos_token_id=0, eos_token_id=1,
                         pad_token_id=2),
        vision_config=dict(hidden_size=args.vision_width, intermediate_size=4 * args.vision_width,
                           num_hidden_layers=args.vision_layers, num_attention_heads=args.vision_heads,
                           image_size=args.image_size, patch_size=args.patch_size),
        projection_dim=args.projection_dim,
    )


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--text_length", type=int, default=248, help="tokens per text (all texts this long)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each candidate (medians quoted)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast")
    parser.add_argument("--peak_tflops", type=float, default=989.0, help="device peak for MFU (H100 bf16 dense)")
    parser.add_argument("--vit_b16", action="store_true", help="ViT-B/16 sizes (overrides the size flags)")
    parser.add_argument("--text_only", action="store_true", help="measure 1. (text features) only")
    parser.add_argument("--text_width", type=int, default=64)
    parser.add_argument("--text_layers", type=int, default=2)
    parser.add_argument("--text_heads", type=int, default=4)
    parser.add_argument("--vision_width", type=int, default=64)
    parser.add_argument("--vision_layers", type=int, default=2)
    parser.add_argument("--vision_heads", type=int, default=4)
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--patch_size", type=int, default=8)
    parser.add_argument("--projection_dim", type=int, default=64)
    parser.add_argument("--vocab_size", type=int, default=200)
    parser.add_argument("--trim_top_k", type=int, default=100)
    args = parser.parse_args()
    if args.vit_b16:
        for name, value in VIT_B16.items():
            setattr(args, name, value)
    return args


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bf16" else nullcontext())

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    torch.manual_seed(0)
    base = CLIPModel(base_config(args)).eval()
    onelip = OneLIPForPreTraining.from_clip(base, max_length=args.text_length).to(device)  # the task trains its queries
    clip248 = HiMoCLIPModel.from_clip(base, stretch_positions=True).to(device)  # trained with the global InfoNCE
    batch = {k: v.to(device) for k, v in random_batch(args.batch_size, args.text_length, args.vocab_size,
                                                      args.image_size).items()}
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    where = (f"{device.type} ({machine}), {args.dtype}, batch {args.batch_size} x {args.text_length} tokens, "
             f"text {args.text_layers} x {args.text_width}, vision {args.vision_layers} x {args.vision_width} "
             f"({args.image_size} px / {args.patch_size})")
    print(where)

    # 1. text features: the RoPE encoder against transformers' CLIP text encoder of the same size and length
    clip_text = CLIPModel(CLIPConfig(**{**base_config(args).to_dict(), "text_config": {
        **base_config(args).text_config.to_dict(), "max_position_embeddings": args.text_length}})).to(device).eval()
    onelip.eval()

    def features(model):
        with torch.inference_mode(), autocast:
            model.get_text_features(input_ids=batch["input_ids"])
        synchronize()

    times = compare({"clip": lambda: features(clip_text), "onelip": lambda: features(onelip.onelip)},
                    repeats=args.repeats)
    print(f"1. text features  CLIPTextModel: {times['clip'] * 1e3:.1f} ms  OneLIP RoPE: {times['onelip'] * 1e3:.1f} ms"
          f"  throughput ratio OneLIP / CLIP: {times['clip'] / times['onelip']:.3f}  (goal >= 0.9)")
    if args.text_only:
        return

    # 2. one training step: OneLIP (teacher + TRIM + 3 losses) against CLIP-248 (global InfoNCE)
    onelip.train()
    clip248.train()
    task = OneLIPTask(onelip, collate_fn=None, teacher=base, trim_top_k=args.trim_top_k)
    clip_task = HiMoCLIPTask(clip248, collate_fn=None, molo_lambda=0.0)  # MoLo without components: CLIP's InfoNCE
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-5)
                  for name, model in (("onelip", onelip), ("clip248", clip248))}

    def onelip_loss():
        with autocast:
            return sum(task.compute_loss(onelip, batch).values())

    def clip_loss():
        with autocast:
            return sum(clip_task.compute_loss(clip248, batch).values())

    def step(name, loss_fn):
        loss_fn().backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        synchronize()

    steps = compare({"clip248": lambda: step("clip248", clip_loss), "onelip": lambda: step("onelip", onelip_loss)},
                    repeats=args.repeats)

    # TRIM-Select's decomposition on this step's own token states (the objective runs it in float32)
    with torch.no_grad(), autocast:
        outputs = onelip(**batch)
        states = outputs.text_model_output.last_hidden_state.float()
        token_embeds = onelip.onelip.text_projection(outputs.text_model_output.last_hidden_state).float()
    valid = batch["attention_mask"].bool()
    image = outputs.image_embeds.float()

    def select(decomposition):
        trim_scores(states, token_embeds, image, valid, task.objective.rank, task.objective.alpha, decomposition)
        synchronize()

    def svd():  # Eq. 4 as written: a batched SVD of each text's (L x d) token states (what TRIM-Select replaces)
        torch.linalg.svd(states, full_matrices=False)
        synchronize()

    trim = compare({"exact": lambda: select("exact"), "subspace": lambda: select("subspace"), "svd": svd},
                   repeats=args.repeats)
    used = "exact" if device.type == "cpu" else "subspace"  # the task's default, trim_decomposition="auto"
    ratio = steps["onelip"] / steps["clip248"]
    print(f"2. training step  CLIP-248 global loss: {steps['clip248'] * 1e3:.1f} ms  OneLIP: "
          f"{steps['onelip'] * 1e3:.1f} ms  ratio OneLIP / CLIP-248: {ratio:.3f}  (goal <= 1.5)")
    print(f"   TRIM-Select scores ({used}, the default here): {trim[used] * 1e3:.1f} ms = "
          f"{trim[used] / steps['onelip'] * 100:.1f}% of the OneLIP step; exact (float64 Gram eigh) "
          f"{trim['exact'] * 1e3:.1f} ms, subspace iteration {trim['subspace'] * 1e3:.1f} ms, a batched SVD of the "
          f"same states (Eq. 4 written literally) {trim['svd'] * 1e3:.1f} ms")

    # 3. FLOPs of each step (forward + backward) and model FLOP utilisation
    from torch.utils.flop_counter import FlopCounterMode

    def flops(loss_fn, model) -> int:
        counter = FlopCounterMode(display=False)
        with counter:
            loss_fn().backward()
        model.zero_grad(set_to_none=True)
        return counter.get_total_flops()

    for name, loss_fn, model in (("CLIP-248", clip_loss, clip248), ("OneLIP", onelip_loss, onelip)):
        count = flops(loss_fn, model)
        seconds = steps["clip248" if name == "CLIP-248" else "onelip"]
        achieved = count / seconds / 1e12
        mfu = (f"  MFU {achieved / args.peak_tflops * 100:.1f}% of {args.peak_tflops:g} TFLOPS"
               if device.type == "cuda" else "")
        print(f"3. {name} step: {count / 1e12:.3f} TFLOP (forward + backward), {achieved:.3f} TFLOPS achieved{mfu}")


if __name__ == "__main__":
    main()
