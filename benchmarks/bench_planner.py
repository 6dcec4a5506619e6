"""The memory planner (`hf-longclip plan`, `hf_longclip.recipes.planner`) against a measured training step at real
size on the CPU: a ViT-L/14 HiMo-CLIP converted from a random checkpoint in Long-CLIP's released layout, one HiMo-CLIP
step (MoLo with HiDe, AdamW, gradient clipping; fp32, the CPU's defaults) at batches 2, 4 and 8 without gradient
checkpointing and 2, 8, 16 and 32 with it (where its activations, not the optimizer's step, set the peak from about
12 on).

    python benchmarks/bench_planner.py [--batches 2,4,8] [--checkpointed-batches 2,8,16,32]
                                       [--work-dir outputs/bench_planner] [--json docs/benchmarks/planner.json]

1. The release: open_clip's ViT-L/14 (QuickGELU, 248 text positions), built with the conversion tests' open_clip
   import (`tests/conversion/test_conversion_clip.py`: `open_clip_modules`), every weight perturbed as their
   `random_open_clip` does, saved as their `longclip_release` saves one: a float16 state dict with a second 248-row
   table `positional_embedding_res`. Then `hf-longclip convert longclip` (rows 0-19 kept frozen, as converted).
   Both are kept under --work-dir and reused.
2. The prediction: `plan_memory(PlanSettings(size="ViT-L/14", method="himo", precision="fp32", target="cpu",
   gradient_checkpointing=...))`, the planner as a user runs it (traced at its default batches 8, 16, 24 on fake
   tensors; the batches measured are read from its fit).
3. The measurement, one fresh process per (batch, checkpointing): the converted checkpoint loaded with
   `HiMoCLIPModel.from_pretrained`, `HiMoCLIPTask`, the loop's step (`hf_longclip.training.memory.TrainingStep`:
   `loop.optimizer_step` with AdamW over the loop's parameter groups, then the task's after-step hook); a first
   step at batch 1 (AdamW's state, kernels' first-call set-up), then the step measured, on random tokens padded as
   the processor pads (every caption but the first one token shorter: the text tower builds its attention mask)
   and random pixels. Memory: the process's peak resident set
   (`VmHWM` of /proc/self/status, reset to the current size through /proc/self/clear_refs just before the step)
   minus its resident set then, both after `gc.collect()`; glibc's malloc is told to map every block of 128 KiB or
   more on its own (`MALLOC_MMAP_THRESHOLD_=131072`, which also stops its threshold from rising), so freed tensors
   leave the resident set at once and the peak is that of live memory, as on a GPU's allocator. Compared with the
   planner's peak minus what is live before the step (weights, optimizer state, the batch). Time: wall and CPU
   seconds of the measured step.

The machine is shared with other jobs (2 cores): the load average before and after each measurement is recorded;
memory does not depend on it, time does.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WIDTH = dict(vision_width=1024, vision_layers=24, patch=14, image=224, text_width=768, text_layers=12, embed=768)
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def write_release(path: Path) -> None:
    """A random Long-CLIP ViT-L/14 release at `path`, as the conversion tests write their tiny ones."""
    import importlib.util

    import torch

    sys.path.insert(0, str(REPO / "tests"))
    spec = importlib.util.spec_from_file_location("test_conversion_clip",
                                                  REPO / "tests" / "conversion" / "test_conversion_clip.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    model_module, _ = tests.open_clip_modules()
    torch.manual_seed(0)
    source = model_module.CLIP(
        WIDTH["embed"], model_module.CLIPVisionCfg(layers=WIDTH["vision_layers"], width=WIDTH["vision_width"],
                                                   patch_size=WIDTH["patch"], image_size=WIDTH["image"]),
        model_module.CLIPTextCfg(context_length=248, vocab_size=tests.VOCAB, width=WIDTH["text_width"],
                                 heads=WIDTH["text_width"] // 64, layers=WIDTH["text_layers"]), quick_gelu=True)
    with torch.no_grad():  # random_open_clip's perturbation
        for param in source.parameters():
            param.add_(0.02 * torch.randn_like(param))
    state = {name: value.half() for name, value in source.state_dict().items()}  # longclip_release's layout
    state["positional_embedding_res"] = (state["positional_embedding"].float()
                                         + 0.05 * torch.randn(248, WIDTH["text_width"])).half()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def prepare(work_dir: Path) -> Path:
    """The converted checkpoint (written once, each stage in its own process)."""
    release, converted = work_dir / "longclip-L-random.pt", work_dir / "himo-L-converted"
    if not release.exists():
        subprocess.run([sys.executable, __file__, "--write-release", str(release)], check=True)
    if not (converted / "config.json").exists():
        subprocess.run([sys.executable, "-m", "hf_longclip.cli", "convert", "longclip", str(release),
                        str(converted)], check=True)
    return converted


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS, VmHWM)."""
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def measure(model_dir: Path, batch_size: int, checkpointing: bool) -> dict:
    """One measured step (see the module docstring), in this process."""
    import torch

    from hf_longclip import HiMoCLIPModel
    from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
    from hf_longclip.training.memory import StepOptions, StepWorkload, TrainingStep

    torch.manual_seed(0)
    model = HiMoCLIPModel.from_pretrained(model_dir, dtype=torch.float32)
    eos = model.config.text_config.eos_token_id

    def batch(rows: int) -> dict:  # padded to the longest caption as the processor pads: every row but the first
        ids = torch.randint(0, eos - 1, (rows, 248))  # one token shorter
        mask = torch.ones_like(ids)
        ids[:1, -1] = eos
        ids[1:, -2:] = eos
        mask[1:, -1] = 0
        return {"input_ids": ids, "attention_mask": mask,
                "pixel_values": torch.randn(rows, 3, WIDTH["image"], WIDTH["image"])}

    # the loop's step (`loop.optimizer_step`), as the planner traces it: AdamW over the loop's parameter groups
    step = TrainingStep(StepWorkload(model, HiMoCLIPTask(model, None), batch),
                        StepOptions(precision="fp32", gradient_checkpointing=checkpointing, foreach=False))
    start = time.perf_counter()
    step(batch(1))
    first = time.perf_counter() - start
    inputs = batch(batch_size)
    gc.collect()
    load_before = os.getloadavg()[0]
    Path("/proc/self/clear_refs").write_text("5")  # peak resident set := current
    before = _status("VmRSS")
    wall, cpu = time.perf_counter(), time.process_time()
    step(inputs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = _status("VmHWM")
    return {"batch_size": batch_size, "gradient_checkpointing": checkpointing, "rss_before_step": before,
            "rss_peak": peak, "measured_bytes": peak - before, "step_wall_s": wall, "step_cpu_s": cpu,
            "first_step_batch_1_s": first, "threads": torch.get_num_threads(),
            "load_average": [load_before, os.getloadavg()[0]]}


def predict(checkpointing: bool, batches: list[int]) -> dict:
    """The planner's figures for the measured step (traced at its default batches)."""
    from hf_longclip.recipes.planner import PlanSettings, plan_memory, step_workload
    from hf_longclip.training.memory import trace_step_memory

    settings = PlanSettings(size="ViT-L/14", method="himo", precision="fp32", target="cpu",
                            gradient_checkpointing=checkpointing)
    start = time.perf_counter()
    memory = trace_step_memory(lambda: step_workload(settings), settings.step_options(),
                               settings.traced_batch_sizes)
    seconds = time.perf_counter() - start
    plan = plan_memory(settings, memory=memory)
    return {"settings": settings.describe(), "traced_at": list(settings.traced_batch_sizes), "trace_s": seconds,
            "weights": plan.weights, "gradients": plan.gradients, "optimizer": plan.optimizer,
            "per_sample": plan.per_sample,
            "batches": {batch: {"peak": memory.peak(batch), "live_before": memory.live_before(batch),
                                "step_bytes": memory.peak(batch) - memory.live_before(batch)} for batch in batches}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="2,4,8", help="batch sizes measured without gradient checkpointing")
    parser.add_argument("--checkpointed-batches", default="2,8,16,32",
                        help="batch sizes measured with gradient checkpointing")
    parser.add_argument("--work-dir", type=Path, default=REPO / "outputs" / "bench_planner",
                        help="where the random release and its conversion are kept")
    parser.add_argument("--json", type=Path, default=REPO / "docs" / "benchmarks" / "planner.json")
    parser.add_argument("--write-release", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=3, metavar=("MODEL_DIR", "BATCH", "CHECKPOINTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_release:
        write_release(args.write_release)
        return
    if args.measure:
        print(json.dumps(measure(Path(args.measure[0]), int(args.measure[1]), args.measure[2] == "1")))
        return
    from hf_longclip.training.provenance import provenance

    batches = {False: [int(value) for value in args.batches.split(",")],
               True: [int(value) for value in args.checkpointed_batches.split(",")]}
    model_dir = prepare(args.work_dir)
    rows, predictions = [], {}
    for checkpointing in (False, True):
        predictions[checkpointing] = predict(checkpointing, batches[checkpointing])
        for batch in batches[checkpointing]:
            proc = subprocess.run([sys.executable, __file__, "--measure", str(model_dir), str(batch),
                                   str(int(checkpointing))], env={**os.environ, **MALLOC}, capture_output=True,
                                  text=True, check=False)
            if proc.returncode:
                raise SystemExit(proc.stderr[-4000:])
            measured = json.loads(proc.stdout.strip().splitlines()[-1])
            predicted = predictions[checkpointing]["batches"][batch]["step_bytes"]
            measured.update(predicted_bytes=predicted, predicted_over_measured=predicted / measured["measured_bytes"])
            rows.append(measured)
            print(f"batch {batch}, checkpointing {'on ' if checkpointing else 'off'}: measured "
                  f"{measured['measured_bytes'] / 2**30:.3f} GiB above the step's start, predicted "
                  f"{predicted / 2**30:.3f} GiB (ratio {measured['predicted_over_measured']:.3f}); step "
                  f"{measured['step_wall_s']:.1f} s wall, {measured['step_cpu_s']:.1f} s CPU, load "
                  f"{measured['load_average'][0]:.1f}-{measured['load_average'][1]:.1f}", flush=True)
    figures = {"provenance": provenance(machine="shared 2-core CPU machine, other jobs running (load averages per "
                                                "row)", malloc=MALLOC),
               "model": "HiMoCLIPModel ViT-L/14 (248 text positions) converted from a random Long-CLIP release",
               "memory": "peak resident set (VmHWM, reset via /proc/self/clear_refs) minus the resident set just "
                         "before the step; predicted: the planner's peak minus what is live before the step",
               "predictions": {("on" if key else "off"): value for key, value in predictions.items()},
               "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=1, default=str) + "\n")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
