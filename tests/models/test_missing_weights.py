"""Weights a checkpoint lacks are initialised by `_init_weights`, never left as uninitialised memory: for every model
class and head, each submodule's weights (every module one and two levels down) are dropped in turn and the rest
loaded. The missing ones are reported by the load, finite, the same on two loads under one seed, and drawn as a
fresh model draws them: constants (norms, zero biases, logit scales) equal, random weights with the fresh model's
spread (a ratio of standard deviations within 1/2..2: uninitialised memory, zeros, or another rule's N(0, 0.02) in
place of a scaled one all fall outside). transformers' own `test_can_init_all_missing_weights` is skipped in the
common tests: it seeds each module's initialisation by patching transformers' private
`PreTrainedModel._initialize_weights`, which the remote code does not call (`InitializesEveryModuleMixin` calls the
models' `_init_weights` itself, on every transformers release); this test checks the same property through the public
API, and scripts/compat_matrix.py on every release."""

import pytest
import torch
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from helpers.builders import tiny_clip, tiny_himo
from helpers.cast import tiny_classifier
from helpers.ditm import tiny_ditm
from helpers.fcast import tiny_fcast
from hf_longclip import DITMModel, HiMoCLIPModel, OneLIPForPreTraining, OneLIPModel

BUILDERS = {
    "himo_clip": tiny_himo,
    "onelip": lambda: OneLIPModel.from_clip(tiny_clip()),
    "onelip_pretraining": lambda: OneLIPForPreTraining.from_clip(tiny_clip()),
    "ditm": tiny_ditm,
    "fcast": tiny_fcast,
    "flair": lambda: tiny_fcast(row="flair"),
    "cast_classifier": tiny_classifier,
    "cast_vision": lambda: tiny_classifier().cast,
}


def submodules(model: torch.nn.Module) -> list[str]:
    """Names of the modules one and two levels down that hold parameters."""
    names = []
    for name, module in model.named_modules():
        if 1 <= name.count(".") + 1 <= 2 and any(True for _ in module.parameters()):
            names.append(name)
    return names


def load_without(model, prefix: str, seed: int):
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(prefix + ".")}
    torch.manual_seed(seed)
    return type(model).from_pretrained(None, config=model.config, state_dict=state, output_loading_info=True)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_submodule_missing_from_a_checkpoint_is_initialised(name):
    torch.manual_seed(0)
    model = BUILDERS[name]()
    fresh = type(model)(model.config).state_dict()  # another draw of the same initialisation
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # the load report of every case, shown once per missing set otherwise
    try:
        for prefix in submodules(model):
            dropped = sorted(k for k in model.state_dict() if k.startswith(prefix + "."))
            first, info = load_without(model, prefix, seed=1)
            second, _ = load_without(model, prefix, seed=1)
            assert sorted(info["missing_keys"]) == dropped, prefix
            first, second = first.state_dict(), second.state_dict()
            for key in dropped:
                value = first[key]
                assert torch.isfinite(value).all(), f"{name}: {key} is not finite when {prefix} is missing"
                torch.testing.assert_close(value, second[key], rtol=0, atol=0, msg=f"{name}: {key} differs")
                expected = fresh[key]
                if expected.numel() < 2 or expected.std() == 0:  # a constant: norms, zero biases, scales
                    torch.testing.assert_close(value, expected, msg=f"{name}: {key} is not its initial constant")
                else:
                    ratio = (value.float().std() / expected.float().std()).item()
                    assert 0.5 < ratio < 2, f"{name}: {key} has std ratio {ratio:.3g} to a fresh model's"
    finally:
        logging.set_verbosity(verbosity)


@pytest.mark.parametrize("model_class, new", [(DITMModel, "image_pooler"), (OneLIPForPreTraining, "trim_refine")])
def test_from_clip_names_the_modules_clip_lacks(model_class, new):
    with CaptureLogger(logging.get_logger("hf_longclip.modeling_common.dual_encoder")) as captured:
        model_class.from_clip(tiny_clip())
    assert f"{model_class.__name__}.from_clip: {new} not in CLIP, at their initialisation" in captured.out


@pytest.mark.parametrize("model_class", [HiMoCLIPModel, OneLIPModel])
def test_from_clip_refuses_a_checkpoint_weight_the_model_has_no_place_for(model_class):
    with pytest.raises(ValueError, match=r"does not match .*unexpected \['image_pooler\."):
        model_class.from_clip(tiny_ditm())  # a DITM base: its trained GPO would be dropped silently
