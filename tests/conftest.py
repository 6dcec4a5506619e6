"""Tiny models, a real CLIP tokenizer with a character vocabulary, and images: fixtures shared by the tests."""

import string

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel, HiMoCLIPProcessor

IMAGE_SIZE = 32


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


def tiny_himo(seed: int = 0, max_positions: int = 248, **kwargs) -> HiMoCLIPModel:
    torch.manual_seed(seed)
    return HiMoCLIPModel(HiMoCLIPConfig(**tiny_sub_configs(max_positions), **kwargs)).eval()


def tiny_processor(max_length: int = 248) -> HiMoCLIPProcessor:
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return HiMoCLIPProcessor(image_processor=image_processor, tokenizer=char_clip_tokenizer(), max_length=max_length)


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
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "modules")
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path / "modules"
    for name in loaded():
        del sys.modules[name]


def molo_loss(image_embeds, text_embeds, logit_scale, tau: float = 0.9, weight: float = 1.0, scope: str = "global"):
    """The MoLo objective's total: the sum of its named terms."""
    from hf_longclip.objectives import MoLoLoss

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
