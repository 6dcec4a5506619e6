"""Load the package's `evaluate` metric scripts by path, or install them so that bare names work offline."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import evaluate

from ..fileio import write_atomic

_SCRIPTS_DIR = Path(__file__).with_name("evaluate_modules")
METRIC_NAMES: tuple[str, ...] = tuple(
    sorted(path.stem for path in _SCRIPTS_DIR.glob("*.py") if not path.stem.startswith("_"))
)


def script_path(name: str) -> Path:
    """Path of the bundled `evaluate` script for metric ``name``."""
    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; available: {METRIC_NAMES}")
    return _SCRIPTS_DIR / f"{name}.py"


def load(name: str, **kwargs) -> evaluate.EvaluationModule:
    """``evaluate.load`` on the bundled script of ``name``: local, never touches the network."""
    return evaluate.load(str(script_path(name)), **kwargs)


def install_metrics(modules_cache: str | os.PathLike | None = None) -> list[Path]:
    """Install every bundled script into evaluate's dynamic-modules cache; return the installed script paths.

    Each script goes to
    ``<modules_cache>/evaluate_modules/metrics/evaluate-metric--<name>/<sha256 of script>/<name>.py``
    (``modules_cache`` defaults to ``evaluate.config.HF_MODULES_CACHE``, i.e. ``$HF_MODULES_CACHE`` or
    ``$HF_HOME/modules``), with the ``__init__.py`` files and ``<name>.json`` metadata that evaluate itself
    writes. That is where ``evaluate.load("<name>")`` falls back to when the Hub is offline or unreachable,
    taking the most recently modified version; re-installing rewrites the same files, so the script just
    installed is always the newest.
    """
    cache = Path(modules_cache if modules_cache is not None else evaluate.config.HF_MODULES_CACHE)
    metrics_dir = cache / evaluate.config.MODULE_NAME_FOR_DYNAMIC_MODULES / "metrics"
    installed = []
    for name in METRIC_NAMES:
        source = script_path(name)
        code = source.read_bytes()
        target_dir = metrics_dir / f"evaluate-metric--{name}" / hashlib.sha256(code).hexdigest()
        target_dir.mkdir(parents=True, exist_ok=True)
        for package_dir in (cache, cache / evaluate.config.MODULE_NAME_FOR_DYNAMIC_MODULES, metrics_dir,
                            target_dir.parent, target_dir):
            (package_dir / "__init__.py").touch()
        target = target_dir / f"{name}.py"
        meta = {"original file path": str(source), "local file path": str(target)}
        write_atomic(target_dir / f"{name}.json", json.dumps(meta).encode())
        write_atomic(target, code)
        installed.append(target)
    return installed
