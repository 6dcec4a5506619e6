"""DITM's loss (adaptive triplet with hardest negatives + ordering, Eq. 4-7) against InfoNCE on the same
embeddings, forward + backward: ratio of times.

    python benchmarks/bench_ditm_loss.py [--batch-size 512] [--captions-per-image 4] [--repeats 50]

The batch holds batch-size / captions-per-image images, each with that many captions (the ordering loss needs
several); InfoNCE sees the same rows. The warm-up variant (all negatives, Sec. IV-C) is timed for information.
"""

import argparse

import torch
import torch.nn.functional as F
from common import clip_config, compare

from hf_longclip.objectives.ditm import DITMLoss
from hf_longclip.objectives.losses import contrastive_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--captions-per-image", type=int, default=4)
    parser.add_argument("--dim", type=int, default=clip_config().projection_dim, help="embedding size")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.batch_size % args.captions_per_image:
        parser.error("--batch-size must be a multiple of --captions-per-image")
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    images = args.batch_size // args.captions_per_image
    image = F.normalize(torch.randn(images, args.dim, generator=generator), dim=-1)
    image = image.repeat_interleave(args.captions_per_image, 0)
    text = F.normalize(image + 0.8 * torch.randn(args.batch_size, args.dim, generator=generator), dim=-1)
    image, text = image.to(device).requires_grad_(), text.to(device).requires_grad_()
    ids = torch.arange(images).repeat_interleave(args.captions_per_image).to(device)
    delta = torch.rand(args.batch_size, generator=generator).to(device)
    scale = torch.tensor(1 / 0.07, device=device)
    ditm, warmup = DITMLoss(), DITMLoss(hardest_negatives=False)

    def step(loss_fn):
        def run() -> None:
            loss_fn().backward()
            image.grad = text.grad = None
            if device.type == "cuda":
                torch.cuda.synchronize()
        return run

    times = compare(
        {
            "infonce": step(lambda: contrastive_loss(image, text, image, text, scale)),
            "ditm": step(lambda: sum(ditm(image, text, ids, delta).values())),
            "ditm_warmup": step(lambda: sum(warmup(image, text, ids, delta).values())),
        },
        repeats=args.repeats,
    )
    threads = f" ({torch.get_num_threads()} threads)" if device.type == "cpu" else ""
    print(f"device: {device}{threads}, batch {args.batch_size} ({images} images x {args.captions_per_image} "
          f"captions), dim {args.dim}, forward + backward, median of {args.repeats}")
    print(f"InfoNCE: {times['infonce'] * 1e3:.3f} ms   DITM: {times['ditm'] * 1e3:.3f} ms   "
          f"DITM warm-up (all negatives): {times['ditm_warmup'] * 1e3:.3f} ms")
    print(f"ratio DITM / InfoNCE: {times['ditm'] / times['infonce']:.3f}  (target <= 1.5)")
    print(f"ratio DITM warm-up / InfoNCE: {times['ditm_warmup'] / times['infonce']:.3f}")


if __name__ == "__main__":
    main()
