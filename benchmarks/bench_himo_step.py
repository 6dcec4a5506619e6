"""One HiMo (MoLo) training step against one global-loss-only step of the same model: ratio of times.

    python benchmarks/bench_himo_step.py [--batch-size 256] [--repeats 5]

The only difference between the two is the HiDe PCA and the component InfoNCE (HiMo-CLIP Eq. 1, 3): the same model
trained by `HiMoCLIPTask` with `molo_lambda=1` and with `molo_lambda=0`.
"""

import argparse
import copy

import torch
import torch.nn.functional as F
from common import clip_config, compare, random_batch

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.objectives.himo_clip import MoLoLoss
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask


def training_step(task, optimizer, batch) -> None:
    loss = sum(task.compute_loss(task.model, batch).values())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--text-length", type=int, default=128, help="tokens per caption (synthetic median: 126)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = clip_config().to_dict()
    model = HiMoCLIPModel(HiMoCLIPConfig(**config)).train()
    tasks = {"molo": HiMoCLIPTask(model, None, molo_lambda=1.0),
             "global_only": HiMoCLIPTask(copy.deepcopy(model), None, molo_lambda=0.0)}
    batch = random_batch(args.batch_size, args.text_length)
    optimizers = {name: torch.optim.AdamW(task.model.parameters(), lr=1e-5) for name, task in tasks.items()}
    times = compare(
        {name: lambda name=name: training_step(tasks[name], optimizers[name], batch)
         for name in ("global_only", "molo")},
        repeats=args.repeats,
    )
    print(f"device: cpu ({torch.get_num_threads()} threads), batch {args.batch_size}, {args.text_length} tokens")
    print(f"global-loss step: {times['global_only'] * 1e3:.1f} ms   MoLo step: {times['molo'] * 1e3:.1f} ms")
    print(f"ratio MoLo / global-only: {times['molo'] / times['global_only']:.3f}  (target <= 1.05)")

    # The loss alone (forward + backward on the embeddings): the part that differs, free of encoder noise.
    image = F.normalize(torch.randn(args.batch_size, config["projection_dim"]), dim=-1).requires_grad_()
    text = F.normalize(torch.randn(args.batch_size, config["projection_dim"]), dim=-1).requires_grad_()
    scale = torch.tensor(14.3)
    losses = compare(
        {weight: lambda weight=weight: sum(MoLoLoss(weight=weight)(image, text, scale).values()).backward()
         for weight in (0.0, 1.0)},
        repeats=20 * args.repeats,
    )
    extra = losses[1.0] - losses[0.0]
    print(f"loss alone: global {losses[0.0] * 1e3:.2f} ms, MoLo {losses[1.0] * 1e3:.2f} ms "
          f"(+{extra * 1e3:.2f} ms = {extra / times['global_only'] * 100:.2f}% of a global-loss step)")


if __name__ == "__main__":
    main()
