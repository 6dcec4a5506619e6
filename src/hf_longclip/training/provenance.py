"""Where a published figure comes from: the command, date, machine and versions, written into every example
script's results JSON (`run_over_seeds`) and the compile benchmark's, so a table can be traced to its run."""

import datetime
import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path

import torch
import transformers


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return names[0] if names else platform.processor() or platform.machine()


def package_version() -> str | None:
    """The installed hf-longclip's version (pyproject.toml's), None when the code runs from a path not installed."""
    try:
        return importlib.metadata.version("hf-longclip")
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the source checkout the code runs from (with `+dirty` for uncommitted changes); None when it
    runs from an installed copy (whose folders above may belong to another repository) or outside git."""
    root = Path(__file__).resolve().parents[3]  # <root>/src/hf_longclip/training/provenance.py
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def provenance(num_processes: int = 1, **extra) -> dict:
    """{command, date (UTC), cpu, threads, processes, device, torch, transformers, hf_longclip, python, commit} and
    `extra` (e.g. the seeds and the wall time)."""
    return {"command": " ".join(sys.argv),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_name(), "threads": torch.get_num_threads(), "processes": num_processes,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "hf_longclip": package_version(),
            "python": platform.python_version(), "commit": git_commit(), **extra}
