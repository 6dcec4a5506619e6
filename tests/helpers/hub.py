"""Hub clients pointed at the loopback fake Hub (helpers/fake_hub.py). huggingface_hub reads HF_ENDPOINT (and
HF_HUB_OFFLINE, HF_HOME, the token) once, at import, so every client runs in a child process whose environment,
`hub_env`, names the fake hub before anything is imported."""

import os
import subprocess
import sys
from pathlib import Path

from .fake_hub import FakeHub

TOKEN = "hf_fake_write_token"


def hub_env(hub: FakeHub, home: Path, token: str | None = TOKEN) -> dict:
    """The environment of a Hub client process pointed at `hub` (set before huggingface_hub is imported)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0", HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", NO_PROXY="127.0.0.1,localhost")
    if token:
        env["HF_TOKEN"] = token
    return env


def load_by_repo_id_without_the_library(hub: FakeHub, repo_id: str, home: Path, auto_class: str = "AutoModel") -> dict:
    """Load `repo_id` from `hub` with transformers' `auto_class` in a fresh process where hf_longclip cannot be
    imported; returns the model's class name and module, and the sum of its parameters (float64)."""
    script = ("import sys; sys.modules['hf_longclip'] = None\n"
              "import transformers\n"
              f"model = transformers.{auto_class}.from_pretrained({repo_id!r}, trust_remote_code=True)\n"
              "print(type(model).__name__, type(model).__module__, "
              "sum(p.double().sum().item() for p in model.parameters()))")
    result = subprocess.run([sys.executable, "-c", script], env={**hub_env(hub, home, token=None), "PYTHONPATH": ""},
                            cwd=home.parent, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    name, module, checksum = result.stdout.split()[-3:]
    return {"class": name, "module": module, "checksum": float(checksum)}
