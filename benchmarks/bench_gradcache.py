"""Gradient caching (`--contrastive_batch_size`): peak memory and time of one HiMo-CLIP (MoLo, HiDe on the whole batch)
loss-and-gradient step on a contrastive batch of 1,024 encoded in chunks of 64, against a batch of 64 without
caching (what fits) and against the batch of 1,024 without caching (where it fits), as ratios, in one process.

    python benchmarks/bench_gradcache.py [--batch 1024] [--chunk 64] [--text-length 77] [--repeats 3]

CPU at a small width (the main job's model: 128 wide, 2 layers, 64 px images). Memory: the peak resident set size of
the step (VmHWM, reset just before it) above the resident size before it, each step in a fresh process, so the model,
its gradients from earlier
steps and the batch are not counted. Time: the process's CPU seconds (median), which other jobs on a shared machine do
not inflate. Expected (GradCache): memory about that of one chunk plus the cached embeddings
and their gradients; time about 4/3 of the uncached batch of 1,024 (one more forward pass per chunk, a forward being
about 1/3 of forward + backward).
"""

import argparse
import subprocess
import sys
import time

import torch
from bench_descriptiveness import reset_peak, status_mib
from common import clip_config, compare, random_batch

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.gradient_cache import cached_backward
from hf_longclip.training.task import sum_of_terms


def steps(args) -> dict:
    """{name: one loss-and-gradient step}: uncached on a chunk, cached on the batch, uncached on the batch."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = HiMoCLIPModel(HiMoCLIPConfig(**clip_config().to_dict())).train()
    task = HiMoCLIPTask(model, None)
    batch = random_batch(args.batch, args.text_length)
    small = {key: value[: args.chunk] for key, value in batch.items()}

    def uncached(inputs):
        def step():
            accelerator.backward(sum_of_terms(task.compute_loss(model, inputs)))
            model.zero_grad(set_to_none=False)
        return step

    def cached():
        cached_backward(task, model, batch, args.chunk, accelerator)
        model.zero_grad(set_to_none=False)

    return {f"uncached {args.chunk}": uncached(small), f"cached {args.batch} in chunks of {args.chunk}": cached,
            f"uncached {args.batch}": uncached(batch)}


def peak_memory(args, index: int) -> float:
    """Peak MiB of step `index` above the resident size before it, in a fresh process (whose allocator holds no
    memory freed by the other steps)."""
    command = [sys.executable, __file__, "--batch", str(args.batch), "--chunk", str(args.chunk), "--text-length",
               str(args.text_length), "--measure", str(index)]
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1024, help="contrastive batch (samples)")
    parser.add_argument("--chunk", type=int, default=64, help="samples encoded at once")
    parser.add_argument("--text-length", type=int, default=77, help="tokens per caption")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", type=int, default=None, help=argparse.SUPPRESS)  # peak_memory's child
    args = parser.parse_args()
    if args.measure is not None:
        step = list(steps(args).values())[args.measure]
        step()  # gradients allocated
        reset_peak()
        before = status_mib("VmRSS")
        step()
        print(status_mib("VmHWM") - before)
        return
    candidates = steps(args)
    peaks = {name: peak_memory(args, index) for index, name in enumerate(candidates)}
    times = compare(candidates, repeats=args.repeats, warmup=1, clock=time.process_time)

    small_name, cached_name, large_name = candidates
    print(f"device: cpu ({torch.get_num_threads()} threads); HiMo-CLIP width 128, 2 layers, 64 px, "
          f"{args.text_length} tokens; MoLo with HiDe over the batch; loss + gradient, no optimizer step")
    for name in candidates:
        print(f"{name:>32}: {times[name]:7.2f} CPU s   peak memory {peaks[name]:8.0f} MiB")
    print(f"cached {args.batch} / uncached {args.chunk}: memory x{peaks[cached_name] / peaks[small_name]:.2f}, "
          f"time x{times[cached_name] / times[small_name]:.2f} (x{args.batch // args.chunk} the samples)")
    print(f"cached {args.batch} / uncached {args.batch}: memory x{peaks[cached_name] / peaks[large_name]:.2f}, "
          f"time x{times[cached_name] / times[large_name]:.2f} (GradCache: about 4/3)")


if __name__ == "__main__":
    main()
