"""Objective state kept by a task (here a memory queue of past text embeddings) survives SIGKILL: resuming from the
latest checkpoint restores it exactly, so the run ends with the queue, weights and losses of an uninterrupted run."""

import json
from pathlib import Path

import pytest
import torch

from helpers.launch import NOISE_ONLY, kill_when_written, launch_command, run, script_env, weights

SCRIPT = Path(__file__).with_name("queue_task_script.py")

# Every test here launches queue_task_script.py under accelerate launch: end to end, slow.
pytestmark = pytest.mark.slow


def _command(output_dir: Path, *extra: str) -> list[str]:
    return launch_command(SCRIPT, ["--num_processes", "1"], str(output_dir), *extra)


def test_killed_run_resumes_with_the_task_state_of_an_uninterrupted_run(tmp_path):
    uninterrupted, interrupted = tmp_path / "uninterrupted", tmp_path / "interrupted"
    env = script_env(tmp_path / "datasets")
    run(_command(uninterrupted), env, tmp_path, timeout=600)

    first_checkpoint = interrupted / "checkpoints" / "queue" / "step_00000004"
    kill_when_written(_command(interrupted), first_checkpoint, env, tmp_path)
    assert not (interrupted / "model").exists(), "the run finished before it was killed"
    # what the checkpoint holds is the queue at that step: full, since 4 steps of 8 samples exceed its 24 rows
    checkpoint = max(first_checkpoint.parent.glob("step_*"))  # that one or a later one (`kill_when_written`)
    saved = torch.load(checkpoint / "process_state_0.pt", weights_only=True)
    assert saved["task"]["queue"].shape == (24, 16)

    run(_command(interrupted, "--resume"), env, tmp_path, timeout=600)
    queues = [torch.load(output / "task_state.pt", weights_only=True)["queue"]
              for output in (interrupted, uninterrupted)]
    torch.testing.assert_close(queues[0], queues[1], atol=1e-6, rtol=0)
    resumed, expected = weights(interrupted / "model"), weights(uninterrupted / "model")
    for name in expected:
        if not name.endswith(NOISE_ONLY):
            torch.testing.assert_close(resumed[name], expected[name], atol=1e-6, rtol=0, msg=name)
    histories = [json.loads((output / "history.json").read_text()) for output in (interrupted, uninterrupted)]
    assert [h["step"] for h in histories[0]] == list(range(1, 13))
    for key in ("loss", "global_loss", "component_loss", "queue_loss"):
        assert [h[key] for h in histories[0]] == [h[key] for h in histories[1]], key
    assert histories[0][-1]["queue_length"] == 24
