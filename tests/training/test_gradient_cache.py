"""Gradient caching (`--contrastive_batch_size`, `hf_longclip.training.gradient_cache`): one optimizer step on a
contrastive batch of 64 encoded in chunks of 16 moves the weights exactly as one step on the batch of 64 in one piece,
for every objective (HiMo-CLIP's MoLo with HiDe, as in the paper and as released, Long-CLIP's, OneLIP's three terms
with its teacher and PO-HNM queues, DITM's triplet and ordering terms, F-CAST's part and whole sigmoid terms, FLAIR's,
classification), in one process and under
2-process DDP and DeepSpeed ZeRO-2 (this file is also the launched script), where the compiled steps (`--torch_compile`,
whole and cached) are also checked against the eager one; dropout is replayed in the second pass;
BatchNorm statistics are updated once per chunk; the loop trains with it (a SIGKILLed cached run resuming exactly:
test_train_scale.py).

The step is SGD with a learning rate of 1e4: its weight change, lr x gradient, is then far above the weights' float32
rounding, and unlike Adam's first step (lr x sign) it would show a gradient wrong by any factor.
"""

import copy
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.builders import CAPTIONS, himo_task, random_images, tiny_processor, tiny_sub_configs
from helpers.cast import tiny_classifier
from helpers.launch import CONFIGS, launch_command, needs_deepspeed, run, script_env
from helpers.training_cases import BATCH, CASES
from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.compile import compile_step
from hf_longclip.training.gradient_cache import cached_backward
from hf_longclip.training.loop import optimizer_step
from hf_longclip.training.task import sum_of_terms

CHUNK = 16  # per process
LEARNING_RATE = 1e4
# Compiled under two processes (minutes each): MoLo's HiDe over the gathered batch and OneLIP's teacher and queues
COMPILED_CASES = ("himo", "onelip")
RTOL = 1e-6  # float32: chunks' products and gradient sums round differently from the whole batch's


def one_step(name: str, accelerator, directory: Path, cached: bool, compiled: bool = False) -> dict:
    """One SGD step of case `name` on this process's 64 samples (rows 64 p ... 64 p + 63 of 128), with or without
    gradient caching, eager or compiled as the loop's `--torch_compile` compiles it (`aot_eager`); returns the
    weight changes divided by the learning rate, the loss terms and PO-HNM's queues."""
    from accelerate.utils import DistributedType

    task, rows = CASES[name](directory / ("cached" if cached else "whole"))
    model = task.model.train()
    if name in ("fcast", "classification"):  # BatchNorm on running statistics (see the case)
        model.apply(lambda m: m.eval() if isinstance(m, torch.nn.BatchNorm2d) else None)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        config = accelerator.state.deepspeed_plugin.deepspeed_config
        config.update(train_micro_batch_size_per_gpu=BATCH, zero_allow_untested_optimizer=True, gradient_clipping=0.0)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    task.restore_files(None, accelerator)
    unwrapped = accelerator.unwrap_model(prepared)
    before = {key: param.detach().clone() for key, param in unwrapped.named_parameters() if param.requires_grad}
    rank = accelerator.process_index
    batch = {key: value.to(accelerator.device) if isinstance(value, torch.Tensor) else value
             for key, value in task.collate_fn(rows[rank * BATCH:(rank + 1) * BATCH]).items()}
    steps = dict.fromkeys(("encode", "loss", "device_step"))
    if compiled:
        torch._dynamo.reset()
        steps = {key: compile_step(getattr(task, key), backend="aot_eager") for key in steps}
    with accelerator.accumulate(prepared):  # the loop's step, without clipping
        terms = optimizer_step(task, prepared, batch, optimizer, accelerator, chunk=CHUNK if cached else 0,
                               steps=steps)
    changes = {key: (before[key] - param.detach()) / LEARNING_RATE for key, param in unwrapped.named_parameters()
               if key in before}
    queues = task.hard_negatives.store.read(np.arange(2 * BATCH))[:2] if name == "onelip" else None
    accelerator.free_memory()  # DeepSpeed: the next case's engine starts afresh
    return {"changes": changes, "terms": {key: value.item() for key, value in terms.items()}, "queues": queues}


def relative_differences(name: str, accelerator, directory: Path) -> dict[str, float]:
    """How far the cached step is from the whole-batch step, relatively (`differences`)."""
    cached = one_step(name, accelerator, directory, True)
    return differences(cached, one_step(name, accelerator, directory, False))


def differences(candidate: dict, whole: dict) -> dict[str, float]:
    """How far `candidate`'s step is from `whole`'s, relatively: the weight change (norm of the difference over norm
    of the change, all parameters), the worst single parameter tensor by the same measure (among those whose change
    is above 1e-6 of the whole: the others have a true gradient of 0, e.g. attention's key bias, and hold rounding
    noise) and the worst loss term. PO-HNM's queues must be equal."""
    errors = torch.stack([(candidate["changes"][key] - change).norm() for key, change in whole["changes"].items()])
    norms = torch.stack([change.norm() for change in whole["changes"].values()])
    significant = norms > 1e-6 * norms.norm()
    assert significant.sum() > 10
    assert whole["terms"].keys() == candidate["terms"].keys()
    if whole["queues"] is not None:
        for candidate_part, whole_part in zip(candidate["queues"], whole["queues"]):
            np.testing.assert_array_equal(candidate_part, whole_part)
    return {"weight_change": float(errors.norm() / norms.norm()),
            "worst_tensor": float((errors / norms)[significant].max()),
            "loss": max(abs(candidate["terms"][key] - value) / abs(value) for key, value in whole["terms"].items())}


@pytest.mark.parametrize("name", list(CASES))
def test_chunks_of_16_step_as_one_batch_of_64_in_one_process(name, accelerator, tmp_path):
    differences = relative_differences(name, accelerator, tmp_path)
    print(name, differences)
    assert differences["weight_change"] < RTOL and differences["loss"] < RTOL
    assert differences["worst_tensor"] < 10 * RTOL  # summed in another order: cancellation in a few reductions


def test_dropout_is_replayed_in_the_second_pass(accelerator):
    """With dropout, the cached gradient is that of the chunks encoded once, in order, with a graph (the first pass
    draws their masks; the second must draw the same), and the generators end where that encoding leaves them."""
    configs = tiny_sub_configs(248)
    for tower in ("text_config", "vision_config"):
        configs[tower]["attention_dropout"] = 0.3
    torch.manual_seed(0)
    model = HiMoCLIPModel(HiMoCLIPConfig(**configs)).train()
    task = himo_task(model)
    batch = dict(tiny_processor()(text=CAPTIONS * 2, images=random_images(8), padding="longest"))
    torch.manual_seed(1)
    chunks = [task.encode(model, chunk) for chunk in task.split_batch(batch, 2)]
    encoded = {key: chunks[0][key] if key == "logit_scale" else torch.cat([c[key] for c in chunks])
               for key in chunks[0]}
    reference_terms = task.loss(model, encoded, batch)
    sum_of_terms(reference_terms).backward()
    reference = {key: param.grad.clone() for key, param in model.named_parameters()}
    after_reference = torch.get_rng_state()
    model.zero_grad()
    torch.manual_seed(1)
    terms = cached_backward(task, model, batch, 2, accelerator)
    assert torch.equal(torch.get_rng_state(), after_reference)
    for key, value in reference_terms.items():
        torch.testing.assert_close(terms[key], value.detach(), rtol=1e-6, atol=0)
    for key, param in model.named_parameters():
        torch.testing.assert_close(param.grad, reference[key], rtol=1e-4, atol=1e-6, msg=key)


def test_batch_norm_statistics_are_updated_once_per_chunk(accelerator):
    """CAST's stem normalises each chunk by its own statistics in training (as it would a batch of the chunk's
    size), and its running statistics move once per chunk, not once more in the second pass."""
    model = tiny_classifier().train()
    rows = [{"image": image, "label": i % 5} for i, image in enumerate(random_images(8))]
    task = CASES["classification"](Path())[0]
    task.model = model
    batch = task.collate_fn(rows)
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for chunk in task.split_batch(batch, 4):
            task.encode(reference, chunk)
    cached_backward(task, model, batch, 4, accelerator)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(int(m.num_batches_tracked) == 2 for m in norms)
    for (key, value), expected in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(value, expected, rtol=0, atol=0, msg=key)


def test_the_loop_trains_the_cached_batch_and_checks_its_size(accelerator, tmp_path):
    """The loop reads batches of --contrastive_batch_size and caches their gradient: its first loss is the loss of
    the whole batch, and the run follows the uncached run's loss curve."""
    from hf_longclip.training.loop import train

    rows = CASES["himo"](tmp_path)[1][:32]
    histories = []
    for sizes in (dict(per_device_train_batch_size=4, contrastive_batch_size=16),
                  dict(per_device_train_batch_size=16)):
        args = LoopArguments(output_dir=str(tmp_path / str(len(histories))), max_steps=3, warmup_steps=0,
                             logging_steps=1, learning_rate=1e-3, **sizes)
        histories.append(train(CASES["himo"](tmp_path)[0], rows, args, accelerator)[1])
    cached, whole = ([record["loss"] for record in history] for history in histories)
    assert len(cached) == 3 and cached == pytest.approx(whole, rel=1e-5)
    with pytest.raises(ValueError, match="at least per_device_train_batch_size"):
        LoopArguments(per_device_train_batch_size=16, contrastive_batch_size=8)


def launch(engine: list[str], tmp_path: Path) -> dict:
    """This file under `accelerate launch` with 2 processes (`main`): the relative differences the main process
    measured."""
    command = launch_command(Path(__file__), [*engine, "--num_processes", "2"], str(tmp_path))
    run(command, dict(script_env(tmp_path / "datasets"), PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])), tmp_path)
    return json.loads((tmp_path / "differences.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("engine", [
    pytest.param(["--config_file", str(CONFIGS / "multi_gpu.yaml")], id="ddp"),  # on a CPU machine: gloo
    pytest.param(["--config_file", str(CONFIGS / "zero2.yaml")], id="zero2", marks=needs_deepspeed),
])
def test_cached_and_compiled_steps_equal_the_eager_whole_step_under_two_processes(engine, tmp_path):
    """Under DDP and ZeRO-2, against the eager whole step of 64 per process: the eager cached step (chunks of 16),
    for every objective, to float32 rounding; and, with `--torch_compile`, the compiled cached step and the compiled
    whole step, for the objectives whose compiled step gathers across processes (`COMPILED_CASES`; test_compile.py
    checks every objective compiled in one process)."""
    measured = launch(engine, tmp_path)
    print(measured)
    compiled = {f"{name}/{kind}" for name in COMPILED_CASES for kind in ("compiled cached", "compiled whole")}
    assert set(measured) == set(CASES) | compiled
    for name in CASES:
        assert measured[name]["weight_change"] < RTOL and measured[name]["loss"] < RTOL, name
        assert measured[name]["worst_tensor"] < 10 * RTOL, name
    for name in compiled:
        assert measured[name]["weight_change"] < 1e-5 and measured[name]["loss"] < 1e-5, name
        assert measured[name]["worst_tensor"] < 1e-4, name


def main(output_dir: str) -> None:
    """Each launched process, on its 64 of the 128 samples: every case's eager cached step against its eager whole
    step; for the cases of `COMPILED_CASES`, also the compiled cached and compiled whole steps against that same
    eager whole step."""
    from hf_longclip.training.loop import make_accelerator

    accelerator = make_accelerator(LoopArguments(output_dir=output_dir, max_grad_norm=0.0))
    directory = Path(output_dir)
    measured = {}
    for name in CASES:
        eager_cached = one_step(name, accelerator, directory / name / "eager", True)
        whole = one_step(name, accelerator, directory / name / "eager", False)
        measured[name] = differences(eager_cached, whole)
        if name in COMPILED_CASES:
            for kind, chunked in (("compiled cached", True), ("compiled whole", False)):
                step = one_step(name, accelerator, directory / name / "compiled", chunked, compiled=True)
                measured[f"{name}/{kind}"] = differences(step, whole)
    if accelerator.is_main_process:
        (directory / "differences.json").write_text(json.dumps(measured, indent=2))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1])
