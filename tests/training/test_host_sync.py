"""No host synchronisation in the eager training step (issue "What fits where", item 5): after a warm-up step, every
model's eager step (tests/helpers/training_cases.py: HiMo-CLIP's MoLo with HiDe, as in the paper and as released,
Long-CLIP's, OneLIP's with its teacher and PO-HNM queues, DITM's, F-CAST's, FLAIR's, CAST classification) runs under
a dispatch mode that records every read of a tensor's values on the host, where the CPU would wait for an
accelerator: `aten._local_scalar_dense` (`.item()`, `int()`, `float()`, `bool()`, `if tensor:`), `aten.equal`, the
ops whose output shape depends on the values (`nonzero`, boolean indexing, `masked_select`, `unique`,
`repeat_interleave` without an output size), and `.tolist()`, `.numpy()`, `.cpu()` (which dispatch nothing on the
CPU: patched). The step is the loop's: the task's `compute_loss` (host hooks included), `accelerator.backward`,
gradient clipping, AdamW, `after_optimizer_step`.

Each read left must be in one of three explicit lists, saying where it comes from: `ALLOWED`, reads inside torch and
transformers, and the SDPA mask's, which reads what transformers' masks read; `CPU_ONLY`, the library's input and
finiteness checks, which read the value only when the tensor is on the CPU (the value is already on the host) and are
asynchronous device assertions (`torch._assert_async`) on an accelerator; `HOST_WORK`, PO-HNM's queues (OneLIP), host
work by design (a memory-mapped store and faiss mining on the CPU) in the task's `prepare_step` / `finish_step`,
outside the objective and outside the compiled step. Any other read fails the test, naming where it happens.

One process here (seconds). The two-process test (slow: it launches `torch.distributed.run`, gloo) covers what only
several processes run: the contrastive gathers (`objectives.losses.gather_with_grad`, whose batch sizes are
exchanged and read on the host at the first step only: the warm-up), DDP's wrapper and accelerate's reductions; that
the mode sees the gathers' one read of the batch sizes; and that unequal batch sizes are still refused at the first
gather.
"""

import collections
import inspect
import json
import sys
import traceback
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.launch import torchrun
from helpers.training_cases import CASES
from hf_longclip.training.loop import optimizer_step

aten = torch.ops.aten
ROWS = 4  # per process and step
WORLD_SIZE = 2

VALUE_READS = {aten._local_scalar_dense.default, aten.equal.default}
SHAPE_FROM_VALUES = {aten.nonzero.default, aten.masked_select.default, aten._unique2.default,
                     aten.unique_consecutive.default, aten.unique_dim.default, aten.repeat_interleave.Tensor}
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default}  # a boolean index: nonzero inside
HOST_COPIES = ("tolist", "numpy", "cpu")

# (file, function) of the frame reading the value -> where the read comes from
ALLOWED = {
    ("torch/optim/optimizer.py", "_get_value"):
        "torch.optim.AdamW reads its step count, a CPU tensor under its default capturable=False: on an "
        "accelerator too it lives on the host, so no device synchronisation",
    ("transformers/masking_utils.py", "_ignore_causal_mask_sdpa"):
        "transformers' create_causal_mask (CLIP's text towers given an attention mask) reads whether the padding mask "
        "is all ones, to drop it for SDPA's fast kernels",
    ("hf_longclip/modeling_common/transformer.py", "attention_mask_for"):
        "the SDPA mask of OneLIP's text encoder, CAST's stages and grouping blocks and F-CAST's stage 2 reads "
        "whether the padding mask is all ones, to drop it for SDPA's fast kernels: the read transformers' "
        "create_causal_mask / create_bidirectional_mask made there before (same mask, same values to the bit); "
        "not while tracing, where the mask is always built",
}
CPU_ONLY = {
    ("hf_longclip/modeling_common/dual_encoder.py", "check_input_ids"): "token ids in the vocabulary",
    ("hf_longclip/modeling_common/dual_encoder.py", "check_on_device"): "end-of-text tokens, finite embeddings",
    ("hf_longclip/models/cast/modeling_cast.py", "_check_inputs"): "superpixel ids below num_segments",
    ("hf_longclip/objectives/onelip.py", "forward"): "OneLIP's terms finite (naming the culprit input on the CPU)",
}
HOST_WORK = {
    ("hf_longclip/recipes/onelip/hard_negatives.py", "negatives"):
        "PO-HNM reads the batch's queues from its memory-mapped store by sample index (prepare_step)",
    ("hf_longclip/recipes/onelip/hard_negatives.py", "refresh"):
        "PO-HNM re-scores and re-mines (faiss, on the CPU) the queues due for refresh with the step's embeddings "
        "(finish_step; every `update_steps` steps of a sample)",
}
_SKIPPED_FRAMES = (__file__, "torch/utils/_python_dispatch.py", "torch/_dynamo/eval_frame.py", "torch/_compile.py")


def _where() -> tuple[str, str, int]:
    """(file, function, line) of the innermost frame that is neither this file nor torch's dispatch wrappers."""
    for frame in reversed(traceback.extract_stack()):
        if not any(frame.filename.endswith(skipped) or skipped in frame.filename for skipped in _SKIPPED_FRAMES):
            name = frame.filename.replace("\\", "/")
            for root in ("site-packages/", "src/"):
                name = name.split(root)[-1]
            return name, frame.name, frame.lineno
    return "?", "?", 0


class HostReads(TorchDispatchMode):
    """Records (what, file, function, line) of each host read while active (see the module's docstring)."""

    def __init__(self):
        super().__init__()
        self.reads, self._originals = collections.Counter(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in VALUE_READS or func in SHAPE_FROM_VALUES or (func in INDEXING and any(
                isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in args[1] or ())):
            self.reads[(str(func), *_where())] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for name in HOST_COPIES:
            original = self._originals[name] = vars(torch.Tensor).get(name)  # None: inherited from TensorBase
            original = original or getattr(torch.Tensor, name)

            def recorded(tensor, *args, _name=name, _original=original, **kwargs):
                self.reads[(f"Tensor.{_name}", *_where())] += 1
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, recorded)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._originals.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)


def classify(reads: collections.Counter) -> dict[str, list[str]]:
    """The reads by list ("allowed", "cpu_only", "host_work", "unexpected"), each 'N x what at file:line (function)'."""
    found = {"allowed": [], "cpu_only": [], "host_work": [], "unexpected": []}
    for (what, file, function, line), count in sorted(reads.items(), key=lambda item: item[0][1:]):
        key = (file, function)
        kind = ("allowed" if key in ALLOWED else "cpu_only" if key in CPU_ONLY else "host_work" if key in HOST_WORK
                else "unexpected")
        found[kind].append(f"{count} x {what} at {file}:{line} ({function})")
    return found


def training_step(task, model, optimizer, accelerator, batch) -> None:
    """The loop's eager step (`loop.optimizer_step`, then the task's after-step hook; no gradient accumulation)."""
    optimizer_step(task, model, batch, optimizer, accelerator, max_grad_norm=1.0)
    task.after_optimizer_step(model, accelerator)


def host_reads_of_a_step(name: str, accelerator, directory: Path) -> dict[str, list[str]]:
    """`classify` of the reads of `name`'s second eager step on this process's rows (the first: the warm-up)."""
    task, rows = CASES[name](directory)
    task.restore_files(None, accelerator)  # OneLIP: its PO-HNM queues
    model = task.model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    rank, world = accelerator.process_index, accelerator.num_processes
    warm_up, measured = (task.collate_fn(rows[(step * world + rank) * ROWS:(step * world + rank + 1) * ROWS])
                         for step in (0, 1))  # collated outside: the data loader's work
    training_step(task, model, optimizer, accelerator, warm_up)
    with HostReads() as mode:
        training_step(task, model, optimizer, accelerator, measured)
    return classify(mode.reads)


def _failure(name: str, found: dict) -> str:
    return f"{name}: host reads outside the allow-lists: {found['unexpected']} (others: {found})"


@pytest.mark.parametrize("name", list(CASES))
def test_the_eager_step_reads_nothing_on_the_host(name, accelerator, tmp_path):
    found = host_reads_of_a_step(name, accelerator, tmp_path)
    assert not found["unexpected"], _failure(name, found)
    assert found["allowed"]  # the mode sees reads: AdamW's step counts at least


def test_the_mode_sees_each_kind_of_host_read():
    """The check can fail: a value read, a value-dependent shape, a boolean index and a copy to the host are each
    recorded, at this file's caller."""
    x = torch.arange(4.0)

    def reads():
        float(x.sum()), x.nonzero(), x[x > 1], x.tolist()

    with HostReads() as mode:
        reads()
    kinds = sorted(what for what, *_ in mode.reads)
    assert kinds == ["Tensor.tolist", "aten._local_scalar_dense.default", "aten.index.Tensor",
                     "aten.nonzero.default"], kinds


def test_cpu_only_checks_are_device_assertions_off_the_cpu():
    """Every `CPU_ONLY` entry reads the value only on the CPU: its function tests the device and, elsewhere, asserts
    on the device (`torch._assert_async`, directly or through `check_on_device`)."""
    from hf_longclip.modeling_common import dual_encoder
    from hf_longclip.models.cast import modeling_cast
    from hf_longclip.objectives import onelip

    functions = {"check_input_ids": dual_encoder.check_input_ids, "check_on_device": dual_encoder.check_on_device,
                 "_check_inputs": modeling_cast.CASTVisionModel._check_inputs,
                 "forward": onelip.OneLIPLoss.forward}
    assert set(functions) == {function for _, function in CPU_ONLY}
    for name, function in functions.items():
        source = inspect.getsource(function)
        assert 'device.type' in source and ("_assert_async" in source or "check_on_device(" in source), name


def per_rank(output: str) -> None:
    """Run by each of the torchrun processes (see __main__ below): unequal batch sizes refused at the first gather,
    then every case's step; the findings go to `output`/rank_<r>.json."""
    import tempfile

    from accelerate import Accelerator

    from hf_longclip.objectives.losses import gather_with_grad

    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == WORLD_SIZE
    rank = accelerator.process_index
    results = {}
    try:
        gather_with_grad(torch.ones(rank + 1, 2))
        results["unequal_batches"] = "not refused"
    except ValueError as error:
        results["unequal_batches"] = str(error)
    with HostReads() as mode:  # a batch size not gathered yet: its agreement is read on the host once, then trusted
        for _ in range(3):
            gather_with_grad(torch.ones(3, 2))
    results["size_reads_of_three_gathers"] = sum(count for (_, file, *_), count in mode.reads.items()
                                                  if file.endswith("objectives/losses.py"))
    for name in CASES:
        with tempfile.TemporaryDirectory() as directory:  # each process its own PO-HNM bank and queues
            results[name] = host_reads_of_a_step(name, accelerator, Path(directory))
    Path(output, f"rank_{rank}.json").write_text(json.dumps(results, indent=1))


@pytest.mark.slow
def test_the_eager_step_reads_nothing_on_the_host_in_two_processes(tmp_path):
    """Two gloo processes, DDP: also the gathers of every contrastive objective (their batch sizes agreed at the
    warm-up step), which one process never runs."""
    torchrun(__file__, str(tmp_path))
    for rank in range(WORLD_SIZE):
        results = json.loads((tmp_path / f"rank_{rank}.json").read_text())
        refusal = results.pop("unequal_batches")
        assert "same batch size" in refusal and "[1, 2]" in refusal, refusal
        assert results.pop("size_reads_of_three_gathers") == WORLD_SIZE  # each process's size, at the first only
        for name, found in results.items():
            assert not found["unexpected"], f"rank {rank}: " + _failure(name, found)


if __name__ == "__main__":
    per_rank(*sys.argv[1:])
