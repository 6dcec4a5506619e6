"""Where a published figure comes from: the command, date, machine and versions, written beside every results
JSON (`run_over_seeds`) and every benchmark's, so a table can be traced to its run."""

import datetime
import platform
import subprocess
import sys
from pathlib import Path

import torch
import transformers

from .. import __version__


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return names[0] if names else platform.processor() or platform.machine()


def git_commit() -> str | None:
    """The commit of the working tree the code runs from (with `+dirty` for uncommitted changes), None outside git."""
    root = Path(__file__).resolve().parents[3]
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
            "torch": torch.__version__, "transformers": transformers.__version__, "hf_longclip": __version__,
            "python": platform.python_version(), "commit": git_commit(), **extra}
