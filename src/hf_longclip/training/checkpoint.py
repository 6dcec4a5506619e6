"""Crash-safe training checkpoints: atomic directories, a manifest that detects partial or corrupt ones, rotation.

A checkpoint is `<run_dir>/step_<N>/`: everything `accelerator.save_state` writes (weights, optimizer, scheduler,
RNG states of every process) plus `trainer_state.json`, written last, holding the loop position (step, epoch,
batches consumed in the epoch), the logged history, the arguments that shape the run (compared on resume) and a
manifest (size and SHA-256 of every other file).
Each is written under a hidden temporary name and renamed into place only when complete, so a killed run leaves
either a whole checkpoint or a `.tmp-*` directory that is ignored and cleaned up.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from ..fileio import sha256_file

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
ARGUMENTS = "arguments"  # the run's signature (`arguments.run_signature`) in a checkpoint's state
PROCESS_STATE_FILE = "process_state_{rank}.pt"
TASK_FILES = "task_files"
_CHECKPOINT_NAME = re.compile(r"^step_(\d+)$")
_TEMP_PREFIX = ".tmp-"


def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}"



def _manifest(directory: Path) -> dict[str, dict]:
    return {
        str(path.relative_to(directory)): {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != STATE_FILE
    }


def _fsync_tree(directory: Path) -> None:
    """Flush every file of `directory` to disk before it is renamed into place."""
    for path in directory.rglob("*"):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())


def write_atomic_directory(target: Path, write: Callable[[Path], None], is_main_process: bool = True,
                           wait_for_everyone: Callable[[], None] = lambda: None) -> Path:
    """Run `write(temp_dir)` on every process, then (main process) rename `temp_dir` to `target`.

    An existing `target` is replaced only after the new one is complete. `wait_for_everyone` is the barrier
    between processes writing shards of one directory (accelerate's `wait_for_everyone`).
    """
    target = Path(target)
    temp = target.with_name(_TEMP_PREFIX + target.name)
    if is_main_process:
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir(parents=True)
    wait_for_everyone()
    write(temp)
    wait_for_everyone()
    if is_main_process:
        _fsync_tree(temp)
        if target.exists():
            old = target.with_name(_TEMP_PREFIX + "old-" + target.name)
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(temp, target)
            shutil.rmtree(old)
        else:
            os.replace(temp, target)
    wait_for_everyone()
    return target


def save_checkpoint(accelerator, run_dir: Path, step: int, state: dict, process_state: dict,
                    save_total_limit: int, write_task_files: Callable[[Path], None] = lambda directory: None) -> Path:
    """`accelerator.save_state` into `run_dir/step_<step>` atomically, with each process's `process_state` (objective
    state such as step counts, the loss window) in its own file, what `write_task_files` writes (called on every
    process) under `task_files/`, and `state` with a manifest in `trainer_state.json`; then keep only the newest
    `save_total_limit` checkpoints (0 keeps all)."""

    def write(directory: Path) -> None:
        accelerator.save_state(str(directory))
        torch.save(process_state, directory / PROCESS_STATE_FILE.format(rank=accelerator.process_index))
        write_task_files(directory / TASK_FILES)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            payload = {**state, "step": step, "manifest": _manifest(directory)}
            (directory / STATE_FILE).write_text(json.dumps(payload, indent=1))

    path = write_atomic_directory(Path(run_dir) / checkpoint_name(step), write, accelerator.is_main_process,
                                  accelerator.wait_for_everyone)
    if accelerator.is_main_process and save_total_limit > 0:
        for old in list_checkpoints(run_dir)[:-save_total_limit]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete-looking checkpoint directories of `run_dir`, oldest first (temporary ones excluded)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in run_dir.iterdir()
             if path.is_dir() and (match := _CHECKPOINT_NAME.match(path.name))]
    return [path for _, path in sorted(found)]


def checkpoint_problem(path: Path) -> str | None:
    """Why `path` cannot be resumed from (missing state file, unreadable JSON, missing/truncated/altered
    file), or None when every file matches its manifest."""
    state_file = Path(path) / STATE_FILE
    if not state_file.is_file():
        return f"no {STATE_FILE} (the save did not finish)"
    try:
        state = json.loads(state_file.read_text())
        manifest = state["manifest"]
        int(state["step"])
    except (ValueError, KeyError, TypeError) as error:
        return f"unreadable {STATE_FILE}: {error!r}"
    if not manifest:
        return "empty manifest"
    for name, expected in manifest.items():
        file = Path(path) / name
        if not file.is_file():
            return f"missing file {name}"
        if file.stat().st_size != expected["size"]:
            return f"{name} has {file.stat().st_size} bytes, expected {expected['size']}"
        if sha256_file(file) != expected["sha256"]:
            return f"{name} does not match its SHA-256"
    return None


def read_state(path: Path) -> dict:
    """The loop state saved with a checkpoint (without its manifest)."""
    state = json.loads((Path(path) / STATE_FILE).read_text())
    state.pop("manifest")
    return state


def read_process_state(path: Path, rank: int) -> dict:
    """The state process `rank` saved with a checkpoint."""
    file = Path(path) / PROCESS_STATE_FILE.format(rank=rank)
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing: was the checkpoint written by fewer processes than resume it?")
    return torch.load(file, weights_only=True)


def resolve_resume(run_dir: Path, resume_from_checkpoint: str | None, overwrite: bool = False) -> Path | None:
    """The checkpoint to resume from, or None to start afresh; never deletes anything.

    `resume_from_checkpoint`: None (start afresh: refused while `run_dir` holds checkpoints, unless `overwrite`),
    `"latest"` (the newest valid checkpoint of `run_dir`, skipping invalid ones with a warning; None when there is no
    checkpoint at all; refused when there are some but none is valid, unless `overwrite`) or an explicit directory
    (an error if invalid). A refusal is a ValueError saying what was found and what to pass."""
    found = list_checkpoints(run_dir)
    if not resume_from_checkpoint:
        if found and not overwrite:
            raise ValueError(
                f"{run_dir} holds {len(found)} checkpoint(s) of this run (newest: {found[-1].name}) and no "
                f"--resume_from_checkpoint was given: pass --resume_from_checkpoint latest to continue it, or "
                f"--overwrite_output_dir to delete them and start afresh")
        return None
    if resume_from_checkpoint != "latest":
        path = Path(resume_from_checkpoint)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint directory {path} does not exist")
        if problem := checkpoint_problem(path):
            raise ValueError(f"cannot resume from {path}: {problem}")
        return path
    problems = []
    for path in reversed(found):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning(f"skipping checkpoint {path}: {problem}")
        problems.append(f"{path.name}: {problem}")
    if problems and not overwrite:
        raise ValueError(
            f"--resume_from_checkpoint latest: no valid checkpoint in {run_dir} ({'; '.join(problems)}). Nothing was "
            f"deleted: resume from an explicit checkpoint directory, or pass --overwrite_output_dir to delete them "
            f"and start afresh")
    return None


def check_arguments(saved: dict, current: dict, what: str, allow_changed: bool = False) -> None:
    """Compare the run signatures (`arguments.run_signature`) of a checkpoint (`saved`) and of the run resuming it
    (`current`), group by group (those of `current`): a ValueError naming every argument that differs (`what`: what
    is refused), or only a warning with `allow_changed`."""
    absent = "(absent)"
    changed = []
    for group, arguments in current.items():
        before = saved.get(group, {})
        changed += [f"{name}={before.get(name, absent)!r} -> {arguments.get(name, absent)!r}"
                    for name in sorted(set(before) | set(arguments)) if before.get(name, absent) != arguments.get(
                        name, absent)]
    if not changed:
        return
    message = f"{what}: arguments that shape the run differ from the checkpoint's: {', '.join(changed)}"
    if allow_changed:
        logger.warning(f"{message} (resuming anyway: --allow_changed_arguments)")
        return
    raise ValueError(f"{message}. Resume with the checkpoint's values, start afresh in another --output_dir, or pass "
                     f"--allow_changed_arguments to resume with the new ones")
