"""Crash-safe training checkpoints: atomic directories, a manifest that detects partial or corrupt ones, rotation.

A checkpoint is `<run_dir>/step_<N>/`: everything `accelerator.save_state` writes (weights, optimizer, scheduler,
RNG states of every process) plus `trainer_state.json`, written last, holding the loop position (step, epoch,
batches consumed in the epoch), the logged history, the arguments that shape the run (compared on resume) and a
manifest (size and XXH3-128 hash, `fileio.xxh3_128`, of every other file: any truncated, missing or altered file,
down to one flipped byte, is refused on resume, naming the file).
Each is written under a hidden temporary name and renamed into place only when complete, so a killed run leaves
either a whole checkpoint or a `.tmp-*` directory that is ignored and cleaned up; a save that fails (a full disk) is
an error naming the checkpoint, and leaves no `.tmp-*` directory.

The manifest costs a small share of the save (benchmarks/bench_checkpoint.py): XXH3 hashes at memory speed, and the
files are hashed while they are written (`HashWhileWriting`: each new piece read from the page cache right after it is
written), not read back once the save is over, from the disk when memory pressure has meanwhile dropped them from the
cache.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import xxhash

from ..fileio import HASH, xxh3_128

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
ARGUMENTS = "arguments"  # the run's signature (`arguments.run_signature`) in a checkpoint's state
PROCESS_STATE_FILE = "process_state_{rank}.pt"
TASK_FILES = "task_files"
_CHECKPOINT_NAME = re.compile(r"^step_(\d+)$")
_TEMP_PREFIX = ".tmp-"


def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}"


class HashWhileWriting:
    """Hashes (XXH3-128) the files being written under `directory` while they are written: a thread reads the bytes
    appended to each since its last look, every `interval` seconds, straight from the page cache. `manifest()` then
    reads only what was written since, and hashes whole (reads back) a file it could not follow (replaced or shrunk
    meanwhile), or every file if following failed.

    The files must be written front to back, each once, as every writer of a checkpoint does (torch.save's zip
    writer refuses any other order, safetensors, pickle, the tasks' file copies): a file rewritten in place behind
    the thread's position would get a hash that refuses it on resume. And the thread must see the bytes each writer
    has written, which holds for the processes of one machine (one page cache), not for a network filesystem written
    from several machines: `save_checkpoint` follows only single-machine runs and reads the others back."""

    def __init__(self, directory: Path, interval: float = 0.1, margin: int = 1 << 26, block: int = 1 << 20):
        self.directory, self.interval, self.margin = Path(directory), interval, margin
        self.files: dict[Path, list] = {}  # path -> [open handle, digest, bytes hashed]
        self.cpu_seconds, self.error = 0.0, None  # the thread's CPU time; what stopped it
        self._buffer = bytearray(block)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-hashing", daemon=True)

    def __enter__(self) -> HashWhileWriting:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop_thread()
        for entry in self.files.values():
            entry[0].close()

    def _stop_thread(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        start = time.thread_time()
        try:
            while not self._stop.wait(self.interval):
                self._catch_up(final=False)
        except Exception as error:  # noqa: BLE001 (the manifest then reads every file back)
            self.error = error
        self.cpu_seconds += time.thread_time() - start

    def _catch_up(self, final: bool) -> None:
        """Hash what was appended to each file since the last look: while the files are written, whole buffers at
        least `margin` bytes behind each file's end (not chasing a writer's last bytes), none of a file with holes;
        up to the end when `final`."""
        block, view = len(self._buffer), memoryview(self._buffer)
        for path in self.directory.rglob("*"):
            if path.name == STATE_FILE or not path.is_file():
                continue
            if (entry := self.files.get(path)) is None:
                try:
                    entry = self.files[path] = [path.open("rb", buffering=0), xxhash.xxh3_128(), 0]
                except FileNotFoundError:  # gone meanwhile
                    continue
            if final:
                left = None
            else:  # a file with holes (written out of order, or sized first) waits for the end
                stat = os.fstat(entry[0].fileno())
                sparse = getattr(stat, "st_blocks", None) is not None and stat.st_blocks * 512 < stat.st_size
                left = 0 if sparse else (stat.st_size - entry[2] - self.margin) // block * block
            while (left is None or left > 0) and (read := entry[0].readinto(self._buffer)):
                entry[1].update(view[:read])
                entry[2] += read
                left = None if left is None else left - read

    def manifest(self) -> dict[str, dict]:
        """{file: {size, xxh3_128}} of every file under `directory` but the state file, once every writer is done."""
        self._stop_thread()
        if self.error is None:
            try:
                self._catch_up(final=True)
            except OSError as error:
                self.error = error
        manifest = {}
        for path in sorted(self.directory.rglob("*")):
            if not path.is_file() or path.name == STATE_FILE:
                continue
            stat, entry = path.stat(), self.files.get(path)
            followed = (self.error is None and entry is not None and entry[2] == stat.st_size
                        and os.fstat(entry[0].fileno()).st_ino == stat.st_ino)
            manifest[str(path.relative_to(self.directory))] = {
                "size": stat.st_size, HASH: entry[1].hexdigest() if followed else xxh3_128(path)}
        return manifest


def on_one_machine(num_processes: int) -> bool:
    """Whether all `num_processes` processes run on this machine, as the launcher says (torchrun's
    LOCAL_WORLD_SIZE, DeepSpeed's LOCAL_SIZE, Open MPI's); False when it does not say."""
    local = next((os.environ[name] for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
                  if os.environ.get(name)), None)
    return num_processes == 1 or (local is not None and int(local) == num_processes)


def _manifest(directory: Path, hashing: HashWhileWriting | None = None) -> dict[str, dict]:
    """The manifest of `directory`'s files: from `hashing`, which followed them while they were written, or read
    back."""
    if hashing is not None:
        return hashing.manifest()
    return {
        str(path.relative_to(directory)): {"size": path.stat().st_size, HASH: xxh3_128(path)}
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
    between processes writing shards of one directory (accelerate's `wait_for_everyone`). A write that fails (a full
    disk, a file-size limit: the writers' errors rarely name the file) is an OSError naming `target`, with the
    writer's error as its cause; the main process removes `temp_dir`, and `target` is left as it was.
    """
    target = Path(target)
    temp = target.with_name(_TEMP_PREFIX + target.name)
    if is_main_process:
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir(parents=True)
    wait_for_everyone()
    try:
        write(temp)
        wait_for_everyone()
        if is_main_process:
            _fsync_tree(temp)  # a full disk may show only here (delayed allocation)
    except Exception as error:
        if is_main_process:
            shutil.rmtree(temp, ignore_errors=True)
        raise OSError(f"could not write {target} ({type(error).__name__}: {error}): nothing was replaced") from error
    if is_main_process:
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
    process) under `task_files/`, and `state` with a manifest in `trainer_state.json` (its hashes taken while the
    files are written, `HashWhileWriting`, when every process runs on this machine; read back otherwise); then keep
    at most `save_total_limit` checkpoints (0 keeps all: `rotate_checkpoints`)."""

    # the main process hashes the files while they are written where every writer shares its page cache
    follow = accelerator.is_main_process and on_one_machine(accelerator.num_processes)

    def write(directory: Path) -> None:
        hashing = HashWhileWriting(directory) if follow else None
        with hashing or contextlib.nullcontext():
            accelerator.save_state(str(directory))
            torch.save(process_state, directory / PROCESS_STATE_FILE.format(rank=accelerator.process_index))
            write_task_files(directory / TASK_FILES)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                payload = {**state, "step": step, "manifest": _manifest(directory, hashing)}
                (directory / STATE_FILE).write_text(json.dumps(payload, indent=1))

    path = write_atomic_directory(Path(run_dir) / checkpoint_name(step), write, accelerator.is_main_process,
                                  accelerator.wait_for_everyone)
    if accelerator.is_main_process:
        rotate_checkpoints(run_dir, path, save_total_limit)
    accelerator.wait_for_everyone()
    return path


def rotate_checkpoints(run_dir: Path, written: Path, total_limit: int) -> list[Path]:
    """Delete the oldest checkpoints of `run_dir` (lowest step first) until at most `total_limit` remain, counting
    `written`, the one just saved; returns those deleted (none with `total_limit` 0).

    It keeps what accelerate's `ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=...)` keeps, whose
    naming and rotation do not fit here: they number saves in one `<project_dir>/checkpoints/` (not steps, per run),
    delete the oldest before saving and save in place, so a save that fails or is killed leaves a half-written
    checkpoint and, with `total_limit=1`, no whole one (tests/training/test_checkpoint.py shows it). This runs once
    `written` is complete, and never deletes it, even behind checkpoints of later steps (a run resumed from an earlier
    checkpoint)."""
    if total_limit <= 0:
        return []
    others = [path for path in list_checkpoints(run_dir) if path.name != Path(written).name]
    doomed = others[:max(0, len(others) + 1 - total_limit)]
    for path in doomed:
        shutil.rmtree(path)
    return doomed


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
        if HASH not in expected:
            return f"the manifest holds no {HASH} hash of {name}"
        if xxh3_128(file) != expected[HASH]:
            return f"{name} does not match its hash ({HASH}): the file was altered"
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
