"""The registry of methods (`hf_longclip.recipes.registry`): every method builds at the tiny size and trains on the
batch its spec describes, the names are unique, each script it names exists and every example script is some
method's."""

import math
from pathlib import Path

import pytest
import torch

from hf_longclip.recipes.registry import SIZES, BuildOptions, PlaceholderInputs, method, method_names, methods

REPO = Path(__file__).resolve().parents[2]
OPTIONS = BuildOptions(hard_negatives=4, bank_captions=32, num_labels=3, target="cpu")


@pytest.mark.parametrize("name", method_names())
def test_each_method_trains_on_its_example_batch(name):
    spec, size = method(name), SIZES["tiny"]
    torch.manual_seed(0)
    model, task = spec.build(size, OPTIONS)
    batch = spec.example_batch(size, 4, PlaceholderInputs(size), OPTIONS)
    terms = task.compute_loss(model.train(), batch)
    loss = sum(terms.values())
    loss.backward()
    assert terms and math.isfinite(loss.item())
    assert any(param.grad is not None for param in model.parameters())


def test_names_and_aliases_resolve_to_their_method():
    assert method("molo") is method("himo")
    assert len(method_names()) == len({id(spec) for spec in methods().values()})
    with pytest.raises(ValueError, match="unknown method 'nope'; choose among"):
        method("nope")


def test_where_a_method_is_not_defined_it_says_why():
    assert method("fcast").unavailable(SIZES["ViT-L/14"]) and method("fcast").unavailable(SIZES["ViT-B/16"]) is None
    assert method("himo").unavailable(SIZES["ViT-bigG-14"]) is None


def test_every_example_script_is_a_methods():
    named = {spec.script for spec in methods().values() if spec.script}
    assert all((REPO / script).is_file() for script in named)
    assert {f"examples/{path.name}" for path in (REPO / "examples").glob("train_*.py")} == named

