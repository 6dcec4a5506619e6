"""Objective state kept by a task (here a memory queue of past text embeddings) survives SIGKILL: resuming from the
latest checkpoint restores it exactly, so the run ends with the queue, weights and losses of an uninterrupted run."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers.launch import kill_when_written, launch_command

SCRIPT = Path(__file__).with_name("queue_task_script.py")

# Every test here launches queue_task_script.py under accelerate launch: end to end, slow.
pytestmark = pytest.mark.slow


def _command(output_dir: Path, *extra: str) -> list[str]:
    return launch_command(SCRIPT, ["--num_processes", "1"], str(output_dir), *extra)


def _env(tmp_path: Path) -> dict:
    return dict(os.environ, HF_DATASETS_CACHE=str(tmp_path / "datasets"), OMP_NUM_THREADS="1")


def test_killed_run_resumes_with_the_task_state_of_an_uninterrupted_run(tmp_path):
    uninterrupted, interrupted = tmp_path / "uninterrupted", tmp_path / "interrupted"
    result = subprocess.run(_command(uninterrupted), env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]

    first_checkpoint = interrupted / "checkpoints" / "queue" / "step_00000004"
    kill_when_written(_command(interrupted), first_checkpoint, _env(tmp_path), tmp_path)
    assert not (interrupted / "model").exists(), "the run finished before it was killed"
    # what the checkpoint holds is the queue at that step: full, since 4 steps of 8 samples exceed its 24 rows
    checkpoint = max(first_checkpoint.parent.glob("step_*"))  # that one or a later one (`kill_when_written`)
    saved = torch.load(checkpoint / "process_state_0.pt", weights_only=True)
    assert saved["task"]["queue"].shape == (24, 16)

    result = subprocess.run(_command(interrupted, "--resume"), env=_env(tmp_path), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    queues = [torch.load(run / "task_state.pt", weights_only=True)["queue"] for run in (interrupted, uninterrupted)]
    torch.testing.assert_close(queues[0], queues[1], atol=1e-6, rtol=0)
    weights = [load_file(run / "model" / "model.safetensors") for run in (interrupted, uninterrupted)]
    for name in weights[1]:
        if not name.endswith("self_attn.k_proj.bias"):  # zero true gradient: AdamW-amplified rounding only
            torch.testing.assert_close(weights[0][name], weights[1][name], atol=1e-6, rtol=0, msg=name)
    histories = [json.loads((run / "history.json").read_text()) for run in (interrupted, uninterrupted)]
    assert [h["step"] for h in histories[0]] == list(range(1, 13))
    for key in ("loss", "global_loss", "component_loss", "queue_loss"):
        assert [h[key] for h in histories[0]] == [h[key] for h in histories[1]], key
    assert histories[0][-1]["queue_length"] == 24
