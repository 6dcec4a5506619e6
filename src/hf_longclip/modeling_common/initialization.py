"""Initialisation that reaches every module, as transformers runs it for the models of its own package."""

import torch
from transformers import PreTrainedModel
from transformers import initialization as init


class InitializesEveryModuleMixin:
    """`initialize_weights` calling `_init_weights` on every module, the ones without parameters of their own
    included (CLIP's attention and MLP blocks, F-CAST's adapter and attention pooling, DITM's GPO).

    For a model whose code lives outside its package, transformers marks such a module initialised without calling
    `_init_weights` on it (a guard for remote code that writes parameters in place). The branch that initialises a
    block from its parent then never runs: `from_pretrained` leaves the weights a checkpoint lacks as uninitialised
    memory (NaN in F-CAST's pooling) or draws them by a rule meant for other layers. Our `_init_weights` write only
    through `transformers.initialization`, whose functions skip loaded parameters, so the guard is not needed.

    `keeps_constructor_draws_when_fresh = True` (F-CAST) keeps transformers' pass for a fresh model, so that a seed
    draws the values it always drew; weights a checkpoint lacks still get the whole pass.
    """

    keeps_constructor_draws_when_fresh = False

    def _initialize_missing_keys(self, *args, **kwargs):
        self._initializing_missing_keys = True
        try:
            super()._initialize_missing_keys(*args, **kwargs)
        finally:
            del self._initializing_missing_keys

    @torch.no_grad()
    def initialize_weights(self) -> None:
        if self.keeps_constructor_draws_when_fresh and not getattr(self, "_initializing_missing_keys", False):
            return super().initialize_weights()

        def apply(module: torch.nn.Module, initialize) -> None:
            for child in module.children():  # children first; a sub-model brings its own `_init_weights`
                apply(child, child._initialize_weights if isinstance(child, PreTrainedModel) else initialize)
            initialize(module, is_custom_code=False)

        with init.guard_torch_init_functions():
            apply(self, self._initialize_weights)
