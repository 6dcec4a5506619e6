"""Tiny models, a real CLIP tokenizer with a character vocabulary, and images: fixtures shared by the tests; and the
run's summary line when transformers' common model tests could not be fetched."""

import string

import numpy as np
import pytest
import torch
from helpers.transformers_common import UNAVAILABLE_PREFIX
from PIL import Image
from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor, OneLIPProcessor

IMAGE_SIZE = 32


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


def char_clip_tokenizer() -> CLIPTokenizer:
    """transformers' real CLIP BPE tokenizer over a character vocabulary (no merges): any lowercase text works."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in string.ascii_lowercase + string.digits + ".,":
        vocab[char] = len(vocab)
        vocab[char + "</w>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[])


def tiny_sub_configs(max_positions: int = 77, vocab_size: int = 80) -> dict:
    width = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    return dict(
        text_config=dict(width, vocab_size=vocab_size, max_position_embeddings=max_positions,
                         bos_token_id=0, eos_token_id=1, pad_token_id=1),
        vision_config=dict(width, image_size=IMAGE_SIZE, patch_size=8),
        projection_dim=16,
    )


def tiny_clip(seed: int = 0) -> CLIPModel:
    torch.manual_seed(seed)
    return CLIPModel(CLIPConfig(**tiny_sub_configs(77))).eval()


def tiny_himo(seed: int = 0, max_positions: int = 248, **config_kwargs) -> HiMoCLIPModel:
    """A tiny HiMo-CLIP; `config_kwargs` are configuration options only (MoLo's options are the task's:
    `himo_task`)."""
    torch.manual_seed(seed)
    return HiMoCLIPModel(HiMoCLIPConfig(**tiny_sub_configs(max_positions), **config_kwargs)).eval()


def himo_task(model, collate_fn=None, **options):
    """HiMo-CLIP's training task (MoLo) over `model`, with MoLo's / HiDe's `options` (`hide_tau`, `molo_lambda`,
    `hide_scope`, ...). Its `compute_loss(model, batch)` gives the named terms of MoLo."""
    from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask

    return HiMoCLIPTask(model, collate_fn, **options)


def tiny_processor(max_length: int = 248) -> HiMoCLIPProcessor:
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return HiMoCLIPProcessor(image_processor=image_processor, tokenizer=char_clip_tokenizer(), max_length=max_length)


def tiny_onelip_processor(max_length: int = 248) -> OneLIPProcessor:
    """OneLIP's processor over `tiny_processor`'s image processor and character tokenizer."""
    base = tiny_processor()
    return OneLIPProcessor(image_processor=base.image_processor, tokenizer=base.tokenizer, max_length=max_length)


def random_images(n: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(n)]


CAPTIONS = [
    "a red circle in the top left. a small blue square below it.",
    "two green triangles. one is large and one is small.",
    "a yellow cross in the center of a gray picture.",
    "a purple diamond on the right. an orange circle on the left. nothing else.",
]


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


def run_python_offline(script: str, tmp_path) -> dict:
    """Run ``script`` in a fresh interpreter offline (``HF_HUB_OFFLINE`` and evaluate's own ``HF_EVALUATE_OFFLINE``,
    which spares each `evaluate.load` its retries), ``HF_HOME`` and ``HF_MODULES_CACHE`` under ``tmp_path`` and an
    empty working directory; return the JSON object printed on its last stdout line."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1", HF_HOME=str(tmp_path / "home"),
               HF_MODULES_CACHE=str(tmp_path / "modules"))
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


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


def molo_loss(image_embeds, text_embeds, logit_scale, tau: float = 0.9, weight: float = 1.0, scope: str = "global"):
    """The MoLo objective's total: the sum of its named terms."""
    from hf_longclip.objectives.himo_clip import MoLoLoss

    return sum(MoLoLoss(tau, weight, scope)(image_embeds, text_embeds, logit_scale).values())


def kill_when_written(command: list[str], path, env: dict, cwd, timeout: float = 600) -> None:
    """Start `command` in its own process group and SIGKILL the whole group as soon as `path` exists (a checkpoint
    of the run); fail if it never appears."""
    import os
    import signal
    import subprocess
    import time

    process = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert path.exists(), f"the run ended before writing {path}"


def check_old_training_options_load(config_class, options: dict, tmp_path, model=None, **config_kwargs) -> None:
    """Configurations saved by an earlier version carry training options that are now arguments of the model's task:
    they still load, with one UserWarning (`drop_training_options`) naming them, and the configuration keeps none of
    them. Checks `config_class(**config_kwargs, **options)`, a config.json holding `options` loaded by
    `config_class.from_pretrained` and by `AutoConfig.from_pretrained`, and, with `model`, the model saved with such a
    config.json reloaded by `from_pretrained` (same weights). Without the options, no such warning."""
    import json
    import warnings

    from transformers import AutoConfig

    def assert_dropped(load):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = load()
        dropped = [w for w in caught if "training options" in str(w.message)]
        assert len(dropped) == 1, [str(w.message) for w in caught]
        assert issubclass(dropped[0].category, UserWarning)
        assert all(repr(name) in str(dropped[0].message) for name in options), str(dropped[0].message)
        config = getattr(loaded, "config", loaded)
        assert isinstance(config, config_class)
        assert not any(hasattr(config, name) or name in config.to_dict() for name in options)
        return loaded

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="ignoring training options")
        fresh = config_class(**config_kwargs)  # no warning without old options
    assert_dropped(lambda: config_class(**config_kwargs, **options))
    directory = tmp_path / "old_config"
    fresh.save_pretrained(directory)
    saved = json.loads((directory / "config.json").read_text())
    assert not set(options) & set(saved)  # what this version writes holds none of them
    (directory / "config.json").write_text(json.dumps({**saved, **options}))
    assert_dropped(lambda: config_class.from_pretrained(directory))
    assert_dropped(lambda: AutoConfig.from_pretrained(directory))
    if model is not None:
        model_dir = tmp_path / "old_model"
        model.save_pretrained(model_dir)
        config_file = model_dir / "config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **options}))
        reloaded = assert_dropped(lambda: type(model).from_pretrained(model_dir))
        for (name, expected), actual in zip(model.state_dict().items(), reloaded.state_dict().values()):
            torch.testing.assert_close(actual, expected, msg=name)
