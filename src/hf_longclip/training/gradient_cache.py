"""Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup",
GradCache): the gradient of a loss over a contrastive batch larger than memory, in two passes over its chunks.

1. Every chunk is encoded without a graph (`task.encode` under `no_grad`), after saving the random number generators'
   state (CPU and the accelerator's), so that the second pass draws the same dropout.
2. The objective runs once on the whole batch (`task.loss`), its inputs being leaf tensors: the gradient of the loss
   with respect to every per-sample output (embeddings, token states), to the shared outputs (the logit scale) and
   to the parameters the objective uses directly (OneLIP's TRIM-Refine, F-CAST's grounding pool) is computed and
   kept ("cached").
3. Every chunk is encoded again, with a graph and its generators' state restored, and back-propagated with the
   surrogate sum(outputs * cached gradient), whose gradient with respect to the weights is the chunk's share of the
   whole batch's (chain rule). The last chunk's surrogate adds the shared outputs' and the direct parameters'
   terms. Every chunk but the last accumulates its gradient locally (DDP's `no_sync`; under DeepSpeed, off the
   gradient-accumulation boundary), so gradients are reduced across processes once per step, by the last.

Memory then grows with the chunk (plus the cached per-sample outputs and their gradients), not with the batch;
time grows by one more forward pass per chunk. Everything the objective gathers across processes is gathered in
step 2, so the loss sees the global batch: N per process times the processes.
"""

from __future__ import annotations

import contextlib

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

from .task import Task, sum_of_terms


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    """The CPU generator's state and, on an accelerator, that device's."""
    states = [torch.get_rng_state()]
    if device.type != "cpu":
        states.append(torch.get_device_module(device.type).get_rng_state(device))
    return states


def _set_rng_state(states: list[torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(states[0])
    if device.type != "cpu":
        torch.get_device_module(device.type).set_rng_state(states[1], device)


def _batch_norm_buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    """The running statistics of every BatchNorm: the second pass must not update them a second time."""
    return [buffer for module in model.modules() if isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
            for buffer in module.buffers()]


@contextlib.contextmanager
def _gradients_kept_local(accelerator: Accelerator, model: torch.nn.Module):
    """Forward and backward passes whose gradients stay on this process, added to those of the chunks before: no
    all-reduce (DDP's `no_sync`) and, under DeepSpeed, no accumulation boundary and no optimizer step (accelerate
    steps the engine whenever `sync_gradients` is set)."""
    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        with accelerator.no_sync(model):
            yield
        return
    sync = accelerator.sync_gradients
    accelerator.gradient_state._set_sync_gradients(False)
    try:
        yield
    finally:
        accelerator.gradient_state._set_sync_gradients(sync)


def _concatenate(values: list) -> torch.Tensor | None:
    return None if values[0] is None else torch.cat(values)


def cached_backward(task: Task, model: torch.nn.Module, batch: dict, chunk_size: int,
                    accelerator: Accelerator, encode=None, loss=None) -> dict[str, torch.Tensor]:
    """Back-propagate `task`'s loss over the whole `batch` into `model`'s gradients, encoding `chunk_size` samples
    at a time (see the module docstring); returns the loss terms, detached. Called where the loop would call
    `accelerator.backward` (inside `accelerator.accumulate`): the last chunk's backward is the step's. `encode` and
    `loss` replace `task.encode` and `task.loss` (the loop passes compiled ones); the task's host work
    (`prepare_step`, `finish_step`) runs around them."""
    encode, loss = encode or task.encode, loss or task.loss
    device = accelerator.device
    batch = task.prepare_step(model, batch)
    chunks = task.split_batch(batch, chunk_size)
    shared = set(task.shared_outputs)
    states, encoded = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(_rng_state(device))
            encoded.append(encode(model, chunk))
    after_first_pass = _rng_state(device)
    statistics = [buffer.clone() for buffer in _batch_norm_buffers(model)]

    whole = {key: encoded[-1][key] if key in shared else _concatenate([outputs[key] for outputs in encoded])
             for key in encoded[0]}
    leaves = {key: value.detach().requires_grad_() for key, value in whole.items()
              if value is not None and value.is_floating_point()}
    direct = [param for param in model.parameters() if param.requires_grad]
    with torch.enable_grad():
        terms = loss(model, {**whole, **leaves}, batch)
        gradients = torch.autograd.grad(sum_of_terms(terms), [*leaves.values(), *direct], allow_unused=True)
    task.finish_step(model, batch, whole)
    terms = {name: term.detach() for name, term in terms.items()}  # the loss's graph goes now, not after pass 2
    cached = dict(zip(leaves, gradients[: len(leaves)]))
    direct_terms = [(param, grad) for param, grad in zip(direct, gradients[len(leaves):]) if grad is not None]
    per_chunk = {key: grad.split([len(outputs[key]) for outputs in encoded]) for key, grad in cached.items()
                 if grad is not None and key not in shared}
    del encoded, whole, leaves, gradients

    for index, chunk in enumerate(chunks):
        last = index == len(chunks) - 1
        with contextlib.nullcontext() if last else _gradients_kept_local(accelerator, model):
            _set_rng_state(states[index], device)
            outputs = encode(model, chunk)
            surrogate = [(outputs[key] * grads[index]).sum() for key, grads in per_chunk.items()
                         if outputs[key].requires_grad]
            if last:
                surrogate += [(outputs[key] * cached[key]).sum() for key in shared
                              if cached.get(key) is not None and outputs[key].requires_grad]
                surrogate += [(param * grad).sum() for param, grad in direct_terms]
            accelerator.backward(sum(surrogate))
    _set_rng_state(after_first_pass, device)
    with torch.no_grad():
        for buffer, value in zip(_batch_norm_buffers(model), statistics):
            buffer.copy_(value)
    return terms
