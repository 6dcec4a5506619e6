"""Crash-safe checkpoints (hf_longclip.training.checkpoint): atomic directories, rotation, and partial or corrupt
checkpoints detected and skipped, never loaded."""

import hashlib
import json
import logging
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration

from hf_longclip.fileio import xxh3_128
from hf_longclip.training.checkpoint import (
    STATE_FILE,
    HashWhileWriting,
    _manifest,
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


def flip_byte(file, position: int) -> None:
    """Flip one bit of the byte at `position` (negative: from the end) of `file`, its size unchanged."""
    data = bytearray(file.read_bytes())
    data[position] ^= 0x01
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, file, reason", [
    (lambda p: (p / "model.safetensors").write_bytes((p / "model.safetensors").read_bytes()[:-7]),
     "model.safetensors", "bytes"),
    (lambda p: (p / "optimizer.bin").write_bytes(bytes(reversed((p / "optimizer.bin").read_bytes()))),
     "optimizer.bin", "does not match its hash"),
    (lambda p: flip_byte(p / "optimizer.bin", (p / "optimizer.bin").stat().st_size // 2),
     "optimizer.bin", "does not match its hash"),
    (lambda p: flip_byte(p / "model.safetensors", -1), "model.safetensors", "does not match its hash"),
    (lambda p: (p / "random_states_0.pkl").unlink(), "random_states_0.pkl", "missing file"),
    (lambda p: (p / STATE_FILE).unlink(), STATE_FILE, "did not finish"),
    (lambda p: (p / STATE_FILE).write_text('{"step": 3, "manif'), STATE_FILE, "unreadable"),
], ids=["truncated", "rewritten", "flipped-byte-middle", "flipped-last-byte", "missing", "no-state",
        "unreadable-state"])
def test_latest_skips_a_damaged_checkpoint_with_a_message(saved, damage, file, reason, caplog):
    """Each damage is refused naming the file; one flipped bit anywhere is enough (a full hash of every byte)."""
    newest = list_checkpoints(saved)[-1]
    damage(newest)
    assert reason in checkpoint_problem(newest) and file in checkpoint_problem(newest)
    with caplog.at_level(logging.WARNING):
        assert resolve_resume(saved, "latest") == list_checkpoints(saved)[-2]
    assert f"skipping checkpoint {newest}" in caplog.text and reason in caplog.text
    with pytest.raises(ValueError, match=f"cannot resume from .*{newest.name}.*{file}.*" if file != STATE_FILE else
                       f"cannot resume from .*{newest.name}.*{reason}"):
        resolve_resume(saved, str(newest))


def test_a_manifest_without_xxh3_hashes_is_refused_naming_the_file(saved):
    """Every file's hash is XXH3-128 (`fileio.xxh3_128`): a manifest holding another (a SHA-256) is refused."""
    newest = list_checkpoints(saved)[-1]
    state = json.loads((newest / STATE_FILE).read_text())
    assert all(entry["xxh3_128"] == xxh3_128(newest / name) for name, entry in state["manifest"].items())
    state["manifest"] = {name: {"size": entry["size"], "sha256": hashlib.sha256((newest / name).read_bytes())
                                .hexdigest()} for name, entry in state["manifest"].items()}
    (newest / STATE_FILE).write_text(json.dumps(state))
    assert checkpoint_problem(newest) == f"the manifest holds no xxh3_128 hash of {next(iter(state['manifest']))}"


def test_files_hashed_while_written_get_the_hashes_of_their_bytes(tmp_path):
    """`HashWhileWriting` follows files written piece by piece (a subfolder too), one replaced and one shrunk after
    it hashed them (read back whole), and one written after its last look: its manifest is the one read back at the
    end; if following fails, every file is read back."""
    for fails in (False, True):
        directory = tmp_path / str(fails)
        (directory / "task_files").mkdir(parents=True)
        with HashWhileWriting(directory, interval=0.001, margin=4096, block=4096) as hashing:
            if fails:
                hashing._catch_up = lambda final: 1 / 0
            with (directory / "weights.bin").open("wb") as weights, (directory / "task_files" / "q").open("wb") as q:
                for piece in range(50):
                    weights.write(bytes([piece]) * 10_000)
                    q.write(b"queue")
                    weights.flush(), q.flush()
                    time.sleep(0.002)
            assert fails or hashing.files[directory / "weights.bin"][2] > 0  # followed while written
            for name in ("replaced", "shrunk"):
                (directory / name).write_bytes(b"first version, long")
            time.sleep(0.05)
            (directory / "replaced").unlink()
            (directory / "replaced").write_bytes(b"second")
            (directory / "shrunk").write_bytes(b"short")
            (directory / "last").write_bytes(b"written last")
            (directory / STATE_FILE).write_text("{}")
            manifest = hashing.manifest()
        assert manifest == _manifest(directory) and len(manifest) == 5
        assert (hashing.error is not None) == fails


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


def test_rotation_keeps_the_newest_as_accelerates_total_limit_does(tmp_path):
    """`save_total_limit` keeps the checkpoints `ProjectConfiguration(total_limit=...)` keeps over the same saves."""
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    for step in range(1, 6):
        save_checkpoint(accelerator, tmp_path / "ours", step, {"epoch": 0}, process_state={}, save_total_limit=2)
    assert [p.name for p in list_checkpoints(tmp_path / "ours")] == ["step_00000004", "step_00000005"]
    reference = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path / "accelerate"), automatic_checkpoint_naming=True, total_limit=2))
    for _ in range(5):
        reference.save_state()
    assert sorted(p.name for p in (tmp_path / "accelerate" / "checkpoints").iterdir()) == ["checkpoint_3",
                                                                                           "checkpoint_4"]
    del model


def test_rotation_never_deletes_the_checkpoint_being_written_nor_the_latest_valid_one(tmp_path):
    """Checkpoints of later steps than the one written (a run resumed from an earlier checkpoint) go before it,
    oldest first; and the previous checkpoint is deleted only once the new one is complete (accelerate's rotation
    deletes before saving: a run killed while saving with `total_limit=1` would have none)."""
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    for step in (2, 5, 8):
        save_checkpoint(accelerator, tmp_path, step, {"epoch": 0}, process_state={}, save_total_limit=0)
    save_checkpoint(accelerator, tmp_path, 6, {"epoch": 0}, process_state={}, save_total_limit=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000006", "step_00000008"]
    save_checkpoint(accelerator, tmp_path, 7, {"epoch": 0}, process_state={}, save_total_limit=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000007"]

    def killed(directory):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(accelerator, tmp_path, 8, {"epoch": 0}, process_state={}, save_total_limit=1,
                        write_task_files=killed)
    assert resolve_resume(tmp_path, "latest") == tmp_path / "step_00000007"
    del model


class FailingState:
    """An object registered for checkpointing whose state cannot be written (a full disk): a save that fails after
    the model's and the optimizer's files are written."""

    def state_dict(self):
        raise OSError(28, "No space left on device")

    def load_state_dict(self, state):
        pass


def test_accelerates_own_rotation_loses_the_last_whole_checkpoint_to_a_failed_save(tmp_path):
    """Why `rotate_checkpoints` and not `ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=...)`:
    accelerate deletes the oldest checkpoint before it saves, and saves in place, so a save that fails leaves a
    half-written checkpoint and, with `total_limit=1`, no whole one; ours keeps the previous one, whole and `latest`."""
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path / "accelerate"), automatic_checkpoint_naming=True, total_limit=1))
    model = torch.nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    checkpoints = tmp_path / "accelerate" / "checkpoints"
    accelerator.save_state()
    whole = {p.name for p in (checkpoints / "checkpoint_0").iterdir()}
    assert {"model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= whole
    accelerator.register_for_checkpointing(FailingState())
    with pytest.raises(OSError, match="No space left"):
        accelerator.save_state()
    assert [p.name for p in checkpoints.iterdir()] == ["checkpoint_1"]  # checkpoint_0 was deleted before the save
    assert {p.name for p in (checkpoints / "checkpoint_1").iterdir()} == whole  # half: no custom_checkpoint_0.pkl
    with pytest.raises(RuntimeError, match="Found checkpoints: 0"):  # it cannot be resumed from
        accelerator.load_state(str(checkpoints / "checkpoint_1"))


    ours = Accelerator(cpu=True)
    model, optimizer = ours.prepare(model, optimizer)
    save_checkpoint(ours, tmp_path / "ours", 1, {"epoch": 0}, process_state={}, save_total_limit=1)
    ours.register_for_checkpointing(FailingState())
    with pytest.raises(OSError, match="could not write .*step_00000002 .*No space left.*nothing was replaced"):
        save_checkpoint(ours, tmp_path / "ours", 2, {"epoch": 0}, process_state={}, save_total_limit=1)
    assert [p.name for p in (tmp_path / "ours").iterdir()] == ["step_00000001"]
    assert resolve_resume(tmp_path / "ours", "latest") == tmp_path / "ours" / "step_00000001"
    assert checkpoint_problem(tmp_path / "ours" / "step_00000001") is None


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


# A child process that starts writing `step_00000004` in the run directory argv[1] and is killed there.
HALF_WRITTEN = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from hf_longclip.training.checkpoint import write_atomic_directory

    def write_half(directory):
        with (directory / "model.safetensors").open("wb") as file:
            file.write(bytes(4096))
            file.flush()
            print("half written", flush=True)
            time.sleep(120)  # SIGKILLed here

    write_atomic_directory(Path(sys.argv[1]) / "step_00000004", write_half)
""")

# A child process saving `step_00000004` of a 256 KiB model in the run directory argv[1] with files limited to 64 KiB
# (SIGXFSZ ignored: writes past the limit fail with EFBIG, as on a full disk with ENOSPC), after which it would keep
# only that checkpoint (save_total_limit=1).
SIZE_LIMITED = textwrap.dedent("""
    import resource, signal, sys
    import torch
    from accelerate import Accelerator
    from hf_longclip.training.checkpoint import save_checkpoint

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(256, 256))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
    save_checkpoint(accelerator, sys.argv[1], 4, {"epoch": 0}, process_state={}, save_total_limit=1)
""")


def test_a_process_killed_while_writing_a_checkpoint_leaves_the_previous_one_latest(saved):
    """A real SIGKILL (no handler, no unwinding) in the middle of a checkpoint's file: the partial directory is never
    taken for a checkpoint, `latest` is the previous one, whole, and the next save of that step clears the debris."""
    child = subprocess.Popen([sys.executable, "-c", HALF_WRITTEN, str(saved)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "half written\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert (saved / ".tmp-step_00000004" / "model.safetensors").stat().st_size == 4096  # killed mid-write
    assert [p.name for p in list_checkpoints(saved)] == ["step_00000001", "step_00000002", "step_00000003"]
    assert resolve_resume(saved, "latest") == saved / "step_00000003"
    assert checkpoint_problem(saved / "step_00000003") is None
    write_atomic_directory(saved / "step_00000004", lambda d: (d / "weights").write_text("whole"))
    assert not (saved / ".tmp-step_00000004").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file-size limits are POSIX")
def test_a_save_past_a_file_size_limit_is_an_error_naming_the_checkpoint_and_keeps_the_previous(saved):
    result = subprocess.run([sys.executable, "-c", SIZE_LIMITED, str(saved)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    error = result.stderr.splitlines()[-1]  # the reason in safetensors' words: "... File too large (os error 27)"
    assert error.startswith(f"OSError: could not write {saved / 'step_00000004'} (SafetensorError: "), error
    assert error.endswith("File too large (os error 27)): nothing was replaced"), error
    # nothing rotated away, no debris: the previous checkpoints are whole and the newest is still `latest`
    assert sorted(p.name for p in saved.iterdir()) == ["step_00000001", "step_00000002", "step_00000003"]
    assert all(checkpoint_problem(path) is None for path in list_checkpoints(saved))
    assert resolve_resume(saved, "latest") == saved / "step_00000003"
