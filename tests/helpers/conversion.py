"""Helpers of the conversion tests (tests/conversion/): OpenAI's BPE file from the installed open_clip, and a
converted checkpoint loaded by AutoModel / AutoProcessor in a fresh process without hf_longclip."""

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

from helpers.fresh_process import fresh_process


def open_clip_bpe_file() -> Path:
    """OpenAI's BPE file (`bpe_simple_vocab_16e6.txt.gz`) from the installed open_clip package, without importing it
    (its `__init__` imports torchvision)."""
    if "open_clip" in sys.modules:  # e.g. test_conversion_clip's package placeholder, which has no spec
        folder = sys.modules["open_clip"].__path__[0]
    elif (spec := importlib.util.find_spec("open_clip")) is not None:
        folder = spec.submodule_search_locations[0]
    else:
        raise RuntimeError("the conversion tests need open_clip: pip install --no-deps open_clip_torch==3.3.0 ftfy")
    return Path(folder) / "bpe_simple_vocab_16e6.txt.gz"


def run_converted_offline(output_dir: Path, tmp_path: Path, body: str) -> dict:
    """Load the converted checkpoint `output_dir` with AutoModel and AutoProcessor (`trust_remote_code=True`) in a
    fresh offline process where hf_longclip is not importable, run `body` there under `torch.no_grad()` (it sees
    `model`, `processor`, `np`, `torch` and fills the dict `result`) and return `result`, which also names the
    loaded classes."""
    script = f"""
import json, sys
sys.modules["hf_longclip"] = None
import numpy as np
import torch
from transformers import AutoModel, AutoProcessor
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
processor = AutoProcessor.from_pretrained(sys.argv[1], trust_remote_code=True)
result = {{"model": type(model).__name__, "processor": type(processor).__name__}}
with torch.no_grad():
{textwrap.indent(body.strip(), "    ")}
print(json.dumps(result))
"""
    proc = fresh_process(script, str(output_dir), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
