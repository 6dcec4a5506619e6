"""Every Python block of the README runs as written, in a fresh interpreter, against the main job's checkpoint
(`outputs/himo/himo-clip`: the real one when the main job has run in this checkout, as in CI, else a tiny one made
by the same script)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), flags=re.DOTALL | re.MULTILINE)
CHECKPOINT = Path("outputs") / "himo" / "himo-clip"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A directory holding `outputs/himo/himo-clip`, where the README's relative paths resolve."""
    if (REPO / CHECKPOINT / "config.json").is_file():
        return REPO
    workdir = tmp_path_factory.mktemp("readme")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", str(REPO / "examples" / "train_himo.py"),
               "--output_dir", str(workdir / CHECKPOINT.parent), "--variants", "himo-clip", "--max_steps", "1",
               "--num_train", "64", "--num_test", "16", "--per_device_train_batch_size", "16",
               "--hidden_size", "32", "--num_layers", "1", "--num_heads", "2", "--base_steps", "0"]
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


def test_the_readme_has_its_python_blocks():
    assert len(BLOCKS) >= 3


@pytest.mark.slow  # its fixture launches train_himo.py unless the main job's checkpoint is here
@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs_as_written(block, workdir):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", block], cwd=workdir, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{block}\n{result.stderr[-4000:]}"
    assert result.stdout.strip(), "every block prints what it shows"
