"""Crash-safe checkpoints (hf_longclip.training.checkpoint): atomic directories, rotation, and partial or corrupt
checkpoints detected and skipped, never loaded."""

import json
import logging

import pytest
import torch
from accelerate import Accelerator

from hf_longclip.training.checkpoint import (
    STATE_FILE,
    checkpoint_problem,
    list_checkpoints,
    read_state,
    resolve_resume,
    save_checkpoint,
    write_atomic_directory,
)


@pytest.fixture
def saved(tmp_path):
    """Three real `accelerator.save_state` checkpoints (steps 1-3) of a small model, all kept."""
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    run_dir = tmp_path / "run"
    for step in (1, 2, 3):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        save_checkpoint(accelerator, run_dir, step, {"epoch": 0, "batches_in_epoch": step}, process_state={},
                            save_total_limit=0)
    return run_dir


def test_checkpoints_are_complete_and_carry_their_state(saved):
    paths = list_checkpoints(saved)
    assert [p.name for p in paths] == ["step_00000001", "step_00000002", "step_00000003"]
    assert all(checkpoint_problem(p) is None for p in paths)
    assert read_state(paths[-1]) == {"epoch": 0, "batches_in_epoch": 3, "step": 3}
    manifest = json.loads((paths[-1] / STATE_FILE).read_text())["manifest"]
    assert {"model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= set(manifest)
    assert resolve_resume(saved, "latest") == paths[-1]
    with pytest.raises(ValueError, match="holds 3 checkpoint"):  # a fresh start would have to delete them
        resolve_resume(saved, None)
    assert resolve_resume(saved, None, overwrite=True) is None


@pytest.mark.parametrize("damage, reason", [
    (lambda p: (p / "model.safetensors").write_bytes((p / "model.safetensors").read_bytes()[:-7]), "bytes"),
    (lambda p: (p / "optimizer.bin").write_bytes(bytes(reversed((p / "optimizer.bin").read_bytes()))), "SHA-256"),
    (lambda p: (p / "random_states_0.pkl").unlink(), "missing file"),
    (lambda p: (p / STATE_FILE).unlink(), "did not finish"),
    (lambda p: (p / STATE_FILE).write_text('{"step": 3, "manif'), "unreadable"),
])
def test_latest_skips_a_damaged_checkpoint_with_a_message(saved, damage, reason, caplog):
    newest = list_checkpoints(saved)[-1]
    damage(newest)
    assert reason in checkpoint_problem(newest)
    with caplog.at_level(logging.WARNING):
        assert resolve_resume(saved, "latest") == list_checkpoints(saved)[-2]
    assert f"skipping checkpoint {newest}" in caplog.text and reason in caplog.text
    with pytest.raises(ValueError, match=f"cannot resume from .*{newest.name}.*{reason}"):
        resolve_resume(saved, str(newest))


def test_no_valid_checkpoint_stops_and_no_checkpoint_starts_from_scratch(saved, tmp_path, caplog):
    for path in list_checkpoints(saved):
        (path / STATE_FILE).unlink()
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="no valid checkpoint.*Nothing was deleted"):
        resolve_resume(saved, "latest")
    assert len(list_checkpoints(saved)) == 3
    assert resolve_resume(saved, "latest", overwrite=True) is None
    assert resolve_resume(tmp_path / "never_written", "latest") is None
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_resume(saved, str(tmp_path / "nope"))


def test_rotation_keeps_the_newest(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    for step in range(1, 6):
        save_checkpoint(accelerator, tmp_path, step, {"epoch": 0}, process_state={}, save_total_limit=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000004", "step_00000005"]
    del model


def test_interrupted_write_leaves_the_previous_directory_whole(tmp_path):
    target = tmp_path / "model"
    write_atomic_directory(target, lambda d: (d / "weights").write_text("old"))

    def crash(directory):
        (directory / "weights").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic_directory(target, crash)
    assert (target / "weights").read_text() == "old"  # the half-written copy never replaced it
    assert list_checkpoints(tmp_path) == []  # and a temporary directory is never taken for a checkpoint
    write_atomic_directory(target, lambda d: (d / "weights").write_text("new"))
    assert (target / "weights").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
