"""`--torch_compile` on the CPU: graph breaks in each model's training step, and the compiled step's time against
the eager step's for the main job's models, in one process.

    python benchmarks/bench_compile.py [--batch-size 64] [--repeats 5] [--backend inductor] [--json out.json]
    python benchmarks/bench_compile.py --breaks-only          # part 1 alone (a minute)

1. Graph breaks: the step of each objective of tests/helpers/training_cases.py (HiMo-CLIP's MoLo with HiDe, OneLIP's
   Eq. 10 with TRIM, its teacher and PO-HNM's logits, DITM's triplet and ordering terms, F-CAST, FLAIR, CAST
   classification; tiny models, 8 rows) through `torch._dynamo.explain`: graphs, graph breaks and their first
   reasons. The step is `Task.device_step` after `Task.prepare_step`; on code older than them, `Task.compute_loss`
   (run with that code's `src` first on PYTHONPATH to count the breaks before).
2. Speed: the main job's three models (examples/train_himo.py: CLIP-77, CLIP-248 and HiMo-CLIP at the main job's
   size, `common.clip_config`, from scratch), one optimizer step (forward, objective, backward, AdamW) eager and
   with the loop's compiled step (`hf_longclip.training.compile.compile_step`, `--backend`), timed interleaved
   (median of `--repeats`, after a warm-up that includes the compilation), and the first compiled loss against the
   eager one (relative difference).
"""

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import clip_config, compare, random_batch

from hf_longclip.training.provenance import provenance

TESTS = Path(__file__).resolve().parents[1] / "tests"


def graph_breaks() -> dict[str, dict]:
    """{case: {"graphs", "graph_breaks", "reasons"}} of each training case's step (part 1)."""
    sys.path[:0] = [str(TESTS)]
    from accelerate import Accelerator

    from helpers.training_cases import CASES

    accelerator = Accelerator(cpu=True)
    results = {}
    for name, build in CASES.items():
        with tempfile.TemporaryDirectory() as directory:
            task, rows = build(Path(directory))
            task.restore_files(None, accelerator)
            model = task.model.train()
            batch = task.collate_fn(rows[:8])
            if hasattr(task, "device_step"):
                batch, step = task.prepare_step(model, batch), task.device_step
            else:  # before the compile path: the whole loss, host work included
                step = task.compute_loss
            torch._dynamo.reset()
            try:
                with torch._dynamo.config.patch(allow_rnn=True):
                    explained = torch._dynamo.explain(step)(model, batch)
            except Exception as error:  # noqa: BLE001 (a step Dynamo cannot trace at all is a result too)
                results[name] = {"graphs": None, "graph_breaks": None,
                                 "reasons": [f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"]}
                continue
            reasons = []
            for reason in explained.break_reasons:
                frame = reason.user_stack[-1] if reason.user_stack else None
                where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
                text = reason.reason.splitlines()[0][:120] + where
                if text not in reasons:
                    reasons.append(text)
            results[name] = {"graphs": explained.graph_count, "graph_breaks": explained.graph_break_count,
                             "reasons": reasons[:6]}
        print(f"{name}: {results[name]['graph_breaks']} graph breaks", flush=True)
    return results


def speed(batch_size: int, text_length: int, repeats: int, backend: str) -> dict[str, dict]:
    """{model: {"eager_ms", "compiled_ms", "ratio", "loss_relative_difference"}} (part 2)."""
    from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
    from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
    from hf_longclip.training.compile import compile_step
    from hf_longclip.training.task import sum_of_terms

    models = {"clip-77": (77, 0.0), "clip-248": (248, 0.0), "himo-clip": (248, 1.0)}
    results = {}
    for name, (positions, molo_lambda) in models.items():
        torch.manual_seed(0)
        model = HiMoCLIPModel(HiMoCLIPConfig(**clip_config(positions).to_dict())).train()
        tasks = {"eager": HiMoCLIPTask(model, None, molo_lambda=molo_lambda),
                 "compiled": HiMoCLIPTask(copy.deepcopy(model), None, molo_lambda=molo_lambda)}
        optimizers = {mode: torch.optim.AdamW(task.model.parameters(), lr=1e-5) for mode, task in tasks.items()}
        torch._dynamo.reset()
        steps = {"eager": tasks["eager"].device_step,
                 "compiled": compile_step(tasks["compiled"].device_step, backend=backend)}
        batch = random_batch(batch_size, min(text_length, positions))
        losses = {}

        def training_step(mode: str) -> None:
            task = tasks[mode]
            terms, _ = steps[mode](task.model, batch)
            loss = sum_of_terms(terms)
            loss.backward()
            losses.setdefault(mode, loss.item())  # the first step's loss: the same weights in both modes
            optimizers[mode].step()
            optimizers[mode].zero_grad(set_to_none=True)

        start = time.perf_counter()
        training_step("compiled")
        first_compiled = time.perf_counter() - start
        times = compare({mode: lambda mode=mode: training_step(mode) for mode in ("eager", "compiled")},
                        repeats=repeats)
        results[name] = {"eager_ms": 1e3 * times["eager"], "compiled_ms": 1e3 * times["compiled"],
                         "ratio": times["compiled"] / times["eager"], "first_compiled_step_s": first_compiled,
                         "loss_relative_difference": abs(losses["compiled"] - losses["eager"]) / abs(losses["eager"])}
        print(f"{name}: eager {results[name]['eager_ms']:.1f} ms, compiled {results[name]['compiled_ms']:.1f} ms, "
              f"ratio {results[name]['ratio']:.3f}, first compiled step {first_compiled:.1f} s, loss rel. diff "
              f"{results[name]['loss_relative_difference']:.1e}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64, help="the main job's per-process batch")
    parser.add_argument("--text-length", type=int, default=128, help="tokens per caption (synthetic median: 126)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--breaks-only", action="store_true")
    parser.add_argument("--json", type=Path, help="write the results there")
    args = parser.parse_args()
    environment = {**provenance(), "backend": args.backend}
    print(environment, flush=True)
    results = {"environment": environment, "graph_breaks": graph_breaks()}
    if not args.breaks_only:
        results["speed"] = speed(args.batch_size, args.text_length, args.repeats, args.backend)
        results["environment"].update(batch_size=args.batch_size, text_length=args.text_length, repeats=args.repeats)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
