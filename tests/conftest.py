"""Fixtures shared by the tests (a CPU Accelerator, a datasets cache, the tiny processor and a batch, an isolated
evaluate modules cache) and the run's summary line when transformers' common model tests could not be fetched. This
file holds fixtures and hooks only: the builders tests import live in tests/helpers/ (`helpers.builders`, ...)."""

import os

import pytest

from helpers.builders import CAPTIONS, random_images, tiny_processor
from helpers.transformers_common import UNAVAILABLE_PREFIX
from hf_longclip import HiMoCLIPProcessor


def pytest_configure(config):
    """Under pytest-xdist (`-n N`) each worker has 1/N of the cores: one thread per worker, in this process and in
    the processes its tests start, so that N workers do not run N times the machine's threads."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        import torch

        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the files holding slow tests (training launches, several processes) come first, each
    keeping its order, and the many short files fill in after them, so that no long launch is left to run alone at
    the end (`--dist loadfile` hands out files in this order). One process keeps the file order."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: item.path not in slow_files)


def pytest_terminal_summary(terminalreporter):
    """Where transformers' common model tests could not be fetched (tests/helpers/transformers_common.py), each test
    class of them skips its tests with the reason; say so once more at the end of the run, in one line: which
    classes, how many tests, and why."""
    skipped = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2].removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else ""
        if reason.startswith(UNAVAILABLE_PREFIX):
            skipped[report.nodeid] = reason
    if skipped:
        classes = sorted({nodeid.split("::")[1] for nodeid in skipped})
        terminalreporter.write_sep(
            "!", f"transformers' common model tests did not run in {len(classes)} test "
                 f"class{'es' if len(classes) > 1 else ''} ({', '.join(classes)}; {len(skipped)} tests skipped): "
                 + "; ".join(sorted(set(skipped.values()))), red=True, bold=True)


@pytest.fixture
def accelerator():
    """A single-process CPU Accelerator, with accelerate's singletons reset around the test."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield Accelerator(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@pytest.fixture(scope="module")
def datasets_cache(tmp_path_factory):
    """A datasets cache shared by the launches of one test file (each script builds its synthetic scenes there)."""
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture
def processor() -> HiMoCLIPProcessor:
    return tiny_processor()


@pytest.fixture
def batch(processor) -> dict:
    return dict(processor(text=CAPTIONS, images=random_images(len(CAPTIONS)), padding="longest"))


@pytest.fixture
def isolated_modules_cache(tmp_path, monkeypatch):
    """Point evaluate's dynamic-modules cache (and the import path it extends) at a temporary directory, with the
    `evaluate_modules` package imported from another test's cache hidden from `sys.modules` for the test."""
    import sys

    import evaluate

    def loaded() -> list[str]:
        return [name for name in sys.modules if name.split(".")[0] == "evaluate_modules"]

    for name in loaded():
        monkeypatch.delitem(sys.modules, name)
    real_cache = str(evaluate.config.HF_MODULES_CACHE)  # on sys.path once a module was loaded: would shadow ours
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "modules")
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry != real_cache])
    yield tmp_path / "modules"
    for name in loaded():
        del sys.modules[name]
