"""Launching from tests: the example scripts under a real `accelerate launch`, a test file's own per-rank step
under `torch.distributed.run`, the environment they run in and the checkpoints they write; a run killed as soon as
it writes a checkpoint (`kill_when_written`), or only one of its processes (`kill_rank_when_written`)."""

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil  # a requirement of accelerate
import pytest
import torch
from safetensors.torch import load_file

import hf_longclip

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
EXAMPLES = REPO / "examples"
CONFIGS = EXAMPLES / "accelerate_configs"
# Attention is invariant to the key bias, so its true gradient is 0 and AdamW turns rounding noise into lr-sized
# steps whose sign differs between runs: not comparable.
NOISE_ONLY = "self_attn.k_proj.bias"
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed (pip install --no-build-isolation "
                                            "-e '.[deepspeed]')")


def free_port() -> int:
    """A port no other run on this machine holds now: the rendezvous of each multi-process launch gets its own, so
    that launches of tests running side by side (`pytest -n 2`) do not meet on accelerate's default 29500."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_command(script: Path, launch_args: list[str], *script_args: str) -> list[str]:
    """The command running `script` under `accelerate launch` (CPU, no mixed precision, no dynamo, a free
    rendezvous port) with `launch_args` (e.g. `--num_processes 2`, `--config_file`) and `script_args`."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--mixed_precision", "no",
            "--dynamo_backend", "no", "--main_process_port", str(free_port()), *launch_args, str(script),
            *script_args]


def accelerate_launch(script: str, output_dir: Path, launch_args: list[str], *script_args: str) -> list[str]:
    """`launch_command` for `examples/<script>` with `--output_dir output_dir` plus `script_args`."""
    return launch_command(EXAMPLES / script, launch_args, "--output_dir", str(output_dir), *script_args)


def script_env(datasets_cache: Path, **extra) -> dict:
    return dict(os.environ, HF_DATASETS_CACHE=str(datasets_cache), OMP_NUM_THREADS="1", **extra)


def run(command: list[str], env: dict, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `command` to its end and fail with the tail of its output unless it succeeds."""
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    return result


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model.safetensors")


def torchrun(test_file: str, *args: str, world_size: int = 2) -> None:
    """Run `test_file` as a script (its `__main__` runs the per-rank step with `args`) in `world_size` CPU processes
    under `torch.distributed.run` (gloo), with this checkout's package and tests/ importable; fail with the tail of
    their output unless all succeed."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world_size),
               "--master_port", str(free_port()), test_file, *args]
    source = Path(hf_longclip.__file__).resolve().parents[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(source), str(TESTS)]))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL `process` and every process under it: torchrun starts each worker in a session of its own, which a
    signal to the launcher's process group does not reach (the workers would train on, orphaned)."""
    if process.poll() is None:  # not reaped: the pid is still this process's
        launcher = psutil.Process(process.pid)
        for member in [launcher, *launcher.children(recursive=True)]:  # the launcher first: it starts no replacement
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
    process.wait()


def written(checkpoint: Path) -> bool:
    """Whether the run has written `checkpoint` (`<run>/step_<n>`) or a later one: rotation (`save_total_limit`)
    may delete it before a loaded machine's poll sees it."""
    return any(path.name >= checkpoint.name for path in checkpoint.parent.glob("step_*"))


def wait_until_written(process: subprocess.Popen, path: Path, timeout: float) -> None:
    """Poll until `path` (a checkpoint of the run) or a later checkpoint exists; fail if `process` ends, or
    `timeout` seconds pass, first."""
    deadline = time.monotonic() + timeout
    while not written(path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert written(path), f"the run ended before writing {path}"


def kill_when_written(command: list[str], path, env: dict, cwd, timeout: float = 600) -> None:
    """Start `command` and SIGKILL it with all its processes as soon as `path` (a checkpoint of the run) or a later
    checkpoint exists; fail if none appears."""
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_written(process, path, timeout)
    finally:
        kill_tree(process)


def kill_rank_when_written(command: list[str], path, rank: int, env: dict, cwd, exit_within: float,
                           timeout: float = 600) -> tuple[subprocess.CompletedProcess, int]:
    """Start `command` (a launch of several processes), SIGKILL only the worker process of `rank` as soon as `path`
    (a checkpoint of the run) or a later checkpoint exists, and wait at most `exit_within` seconds for the launcher
    to end (else kill it with all its processes and fail): its result, stdout and stderr together in `stdout`, and
    the pid killed."""
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, text=True)
        try:
            wait_until_written(process, path, timeout)
            # the launcher's own children are the workers (their data-loader workers share RANK, one level down)
            worker, = (child for child in psutil.Process(process.pid).children()
                       if child.environ().get("RANK") == str(rank))
            worker.kill()
            try:
                process.wait(exit_within)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the launch still ran {exit_within} s after rank {rank} was killed") from None
        finally:
            kill_tree(process)
        output.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, output.read()), worker.pid
