"""Checkpoints loaded in a fresh interpreter where hf_longclip is not importable, offline: only the checkpoint's own
(remote) code may run. `save_checkpoint` writes a checkpoint with images beside it and returns what this process
computes; `load_in_fresh_process` runs a script built on `FRESH_PROCESS_PRELUDE` on it and returns what that process
computed, for the test to compare. `run_python_offline` runs a script offline with its own Hugging Face caches and
returns the JSON object it prints."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from helpers.builders import random_images

# What every fresh-process check starts with: the checkpoint's own code loaded by AutoModel / AutoProcessor, and the
# processor's inputs for the captions and the images saved beside the checkpoint. Each check appends its own lines.
FRESH_PROCESS_PRELUDE = """
import sys
sys.modules["hf_longclip"] = None  # the library is not importable: only the checkpoint's own code may run
import torch
from PIL import Image
from transformers import AutoModel, AutoProcessor
checkpoint, captions, output = sys.argv[1], sys.argv[2].split("|"), sys.argv[3]
model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
processor = AutoProcessor.from_pretrained(checkpoint, trust_remote_code=True)
images = [Image.open(f"{checkpoint}/image{i}.png") for i in range(len(captions))]
inputs = processor(text=captions, images=images)
"""

FRESH_PROCESS_LOAD = FRESH_PROCESS_PRELUDE + """
with torch.no_grad():
    out = model(**inputs, return_loss=True)
model.save_pretrained(output + ".resaved")  # the remote code saves itself again, unchanged
processor.save_pretrained(output + ".resaved")
torch.save({"text": out.text_embeds, "image": out.image_embeds, "loss": out.loss,
            "classes": [type(model).__module__, type(processor).__module__],
            "input_ids": inputs["input_ids"]}, output)
"""


def fresh_process(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `script` with `args` in a fresh interpreter from `tmp_path`: offline, with a Hugging Face home of its own
    under `tmp_path` and no PYTHONPATH (its scripts block hf_longclip with `sys.modules["hf_longclip"] = None`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), PYTHONPATH="")
    return subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)


def load_in_fresh_process(checkpoint: Path, captions: list[str], tmp_path: Path,
                          script: str = FRESH_PROCESS_LOAD) -> dict:
    """Run `script` (FRESH_PROCESS_PRELUDE plus its own lines) on `checkpoint`, saved with its images by
    `save_checkpoint`, and `captions` in a fresh process; return what it saved."""
    output = tmp_path / "fresh.pt"
    result = fresh_process(script, str(checkpoint), "|".join(captions), str(output), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(output)


def save_checkpoint(model, processor, captions: list[str], path: Path) -> dict:
    """Save `model` and `processor` to `path` with one random image per caption beside them; return the model's
    outputs on those inputs in this process (what a fresh process must reproduce)."""
    model.save_pretrained(path)
    processor.save_pretrained(path)
    images = random_images(len(captions))
    for i, image in enumerate(images):
        image.save(path / f"image{i}.png")
    inputs = processor(text=captions, images=images)
    with torch.no_grad():
        out = model(**inputs, return_loss=True)
    return {"text": out.text_embeds, "image": out.image_embeds, "loss": out.loss, "input_ids": inputs["input_ids"]}


def run_python_offline(script: str, tmp_path) -> dict:
    """Run ``script`` in a fresh interpreter offline (``HF_HUB_OFFLINE`` and evaluate's own ``HF_EVALUATE_OFFLINE``,
    which spares each `evaluate.load` its retries), ``HF_HOME`` and ``HF_MODULES_CACHE`` under ``tmp_path`` and an
    empty working directory; return the JSON object printed on its last stdout line."""
    import json

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
