"""`--torch_compile`: the whole training step compiled, the model's encoders and the objective together.

The loop compiles a task's `device_step` (`encode` then `loss`; under gradient caching `encode` and `loss` each) with
`torch.compile`; autograd's backward of the compiled forward is compiled with it. The task's host work
(`prepare_step`, `finish_step`: PO-HNM's queue reads and refreshes) stays outside. Every task's step compiles
without a graph break (tests/training/test_compile.py asserts it with `fullgraph=True`): no data-dependent shape and
no host read, which is what keeps an accelerator from waiting on the host. The options also come from accelerate's
own dynamo configuration (`accelerate launch --dynamo_backend inductor`), which would otherwise compile the model
alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from accelerate import Accelerator
from accelerate.utils import DynamoBackend

from .arguments import LoopArguments


def compile_options(args: LoopArguments, accelerator: Accelerator) -> dict | None:
    """`torch.compile`'s keyword arguments for the step: from `--torch_compile` (backend, mode), else from
    accelerate's dynamo configuration; None when neither asks for compilation."""
    if args.torch_compile:
        return {"backend": args.torch_compile_backend, "mode": args.torch_compile_mode}
    plugin = accelerator.state.dynamo_plugin
    if plugin is None or plugin.backend == DynamoBackend.NO:
        return None
    return plugin.to_kwargs()


def compile_step(function: Callable, **options) -> Callable:
    """`function` compiled by `torch.compile(**options)`, traced with Dynamo's RNN support on (GPO's GRU, DITM)."""
    compiled = torch.compile(function, **options)

    @functools.wraps(function)
    def step(*args, **kwargs):
        with torch._dynamo.config.patch(allow_rnn=True):
            return compiled(*args, **kwargs)

    return step
