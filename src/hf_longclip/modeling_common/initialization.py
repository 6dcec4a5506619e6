"""Initialisation that reaches every module, on every transformers release, through its public entry points."""

import torch
from torch import nn
from transformers import PreTrainedModel

from hf_longclip.modeling_common.transformers_compat import init


@torch.no_grad()
def default_initialization(module: nn.Module, config) -> None:
    """transformers' default rule (`PreTrainedModel._init_weights` of 5.x) for the layers it covers, written once
    here because a parent's `_init_weights` reaches it on some releases only (CLIP's does not on 4.57 and 5.0):
    linear weights N(0, std) and zero biases, embeddings N(0, std), norms one and zero; std is the configuration's
    `initializer_range`, else its `initializer_factor`."""
    std = getattr(config, "initializer_range", None) or getattr(config, "initializer_factor", 0.02)
    if isinstance(module, nn.Linear):
        init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        init.normal_(module.weight, mean=0.0, std=std)
    elif isinstance(module, nn.LayerNorm):
        init.ones_(module.weight)
        init.zeros_(module.bias)


class InitializesEveryModuleMixin:
    """`initialize_weights` calling the model's `_init_weights` on every module, the ones without parameters of their
    own included (CLIP's attention and MLP blocks, F-CAST's adapter and attention pooling, DITM's GPO); a sub-model
    (a `PreTrainedModel` child, or a CLIP tower with its `weights_initializer`: `transformers_compat.clip_tower`)
    brings its own `_init_weights`, children come before their parents.

    `initialize_weights` is what transformers calls, on every release from 4.57 on, for a fresh model (from
    `post_init`) and for the weights a checkpoint lacks (from `from_pretrained`, after or before the loaded weights
    land: our `_init_weights` write through `transformers.initialization` where it exists, whose functions skip
    loaded weights, and 4.57 loads the checkpoint's weights after this pass). transformers' own pass would, for code
    outside its package, mark a module without parameters of its own initialised without calling `_init_weights` on
    it (5.5 and later): the rule a parent holds for its blocks would never run, and `from_pretrained` would leave the
    weights a checkpoint lacks as uninitialised memory (NaN in F-CAST's pooling) or draw them by another rule.

    A module is initialised once (`weights_initialized`, set by the pass): a constructor calling `post_init` again
    after adding modules (DITM's GPO) initialises only those. In a fresh model (the pass `post_init` runs), a
    sub-model is skipped: it initialised itself in its own constructor. `keeps_constructor_draws_when_fresh = True`
    (F-CAST) limits a fresh model's pass to the modules holding parameters or buffers of their own, so that a seed
    draws the values it always drew; weights a checkpoint lacks still get the whole pass.
    """

    keeps_constructor_draws_when_fresh = False

    def post_init(self) -> None:
        self.initializing_fresh_model = True
        try:
            super().post_init()
        finally:
            del self.initializing_fresh_model

    @torch.no_grad()
    def initialize_weights(self) -> None:
        fresh = getattr(self, "initializing_fresh_model", False)
        owners_only = fresh and self.keeps_constructor_draws_when_fresh

        def apply(module: torch.nn.Module, initialize) -> None:
            for child in module.children():
                own = child._init_weights if isinstance(child, PreTrainedModel) else getattr(
                    child, "weights_initializer", None)
                if own is None:
                    apply(child, initialize)
                elif not fresh:
                    apply(child, own)
            if getattr(module, "weights_initialized", False):
                return
            owns = any(True for _ in module.parameters(recurse=False)) or any(
                buffer is not None for buffer in module.buffers(recurse=False))
            if owns or not owners_only:
                initialize(module)
            module.weights_initialized = True

        apply(self, self._init_weights)
