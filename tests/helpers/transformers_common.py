"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`) for the *installed* transformers.

They are not in the transformers wheel; its source distribution on the package index carries them as
`tests/test_modeling_common.py` and `tests/test_configuration_common.py`. `common_tests()` downloads that sdist
once per transformers version with pip (so pip's own index settings apply), extracts those two files into a
package `transformers_tests` in a cache directory, puts the directory on `sys.path` and imports them.

The sdist ships only the top-level `tests/*.py`, not the sub-packages they import with relative imports. Three
modules are therefore written as stand-ins, each saying what it replaces:

- `generation/test_utils.py`: an empty `GenerationTesterMixin`, the base class that only generative models'
  testers inherit (`ModelTesterMixin` uses it in an `issubclass` check alone);
- `utils/test_configuration_utils.py`: `config_common_kwargs`, read only by `ConfigTester` for configs without
  sub-configs (composite configs return before reading it); using it fails loudly;
- `exporters/test_export.py`: `ExportTesterMixin`, `ModelTesterMixin`'s base class with the exporter-backend tests
  (Dynamo, ONNX, OpenVINO, ExecuTorch). The stand-in has one test, which skips with that reason; tests of
  `torch.export` and `torch.compile` belong next to the model's tester instead.

Cache: `$HF_LONGCLIP_TRANSFORMERS_TESTS_CACHE` if set, else `$XDG_CACHE_HOME/hf_longclip/transformers_tests`
(`~/.cache/...` without XDG_CACHE_HOME), one folder per transformers version. A folder is built under a temporary
name and renamed into place, so concurrent pytest processes never see a half-written one (the loser of a race
discards its copy). `$HF_LONGCLIP_TRANSFORMERS_SDIST` may name a local `transformers-<version>.tar.gz` to use
instead of downloading (offline runs). Where neither works, `common_tests()` raises `CommonTestsUnavailable` with
the reason, for the caller to skip on.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import transformers

PACKAGE = "transformers_tests"
# Bump when the layout or the stand-ins change: an older cache folder is then ignored, not reused.
LAYOUT_VERSION = 2
SDIST_FILES = ("test_modeling_common.py", "test_configuration_common.py")
CACHE_ENV = "HF_LONGCLIP_TRANSFORMERS_TESTS_CACHE"
SDIST_ENV = "HF_LONGCLIP_TRANSFORMERS_SDIST"
DOWNLOAD_TIMEOUT_S = 300

_NOT_SHIPPED = "is not in transformers' source distribution (its tests/ holds only the top-level files)"
STAND_INS = {
    "exporters/test_export.py": f'''"""Stand-in: tests/exporters/test_export.py {_NOT_SHIPPED}."""

import unittest


class ExportTesterMixin:
    """Stand-in for transformers' exporter-backend tests (Dynamo, ONNX, OpenVINO, ExecuTorch)."""

    def test_export_tester_mixin(self):
        raise unittest.SkipTest(
            "ExportTesterMixin: tests/exporters/test_export.py {_NOT_SHIPPED}; "
            "torch.export / torch.compile are tested beside the model's tester"
        )
''',
    "generation/test_utils.py": f'''"""Stand-in: tests/generation/test_utils.py {_NOT_SHIPPED}.

ModelTesterMixin only checks `issubclass(test_class, GenerationTesterMixin)` against whether the model can generate.
"""


class GenerationTesterMixin:
    """Stand-in: testers of models that can `generate` need transformers' real GenerationTesterMixin."""
''',
    "utils/test_configuration_utils.py": f'''"""Stand-in: tests/utils/test_configuration_utils.py {_NOT_SHIPPED}.

ConfigTester reads `config_common_kwargs` only for configs without sub-configs; using it here fails loudly.
"""


class _NotShipped(dict):
    def _fail(self, *args, **kwargs):
        raise RuntimeError(
            "config_common_kwargs: tests/utils/test_configuration_utils.py {_NOT_SHIPPED}; "
            "ConfigTester.check_config_arguments_init cannot run for a config without sub-configs"
        )

    __iter__ = __len__ = __getitem__ = __contains__ = __deepcopy__ = keys = items = values = _fail


config_common_kwargs = _NotShipped()
''',
}


class CommonTestsUnavailable(RuntimeError):
    """transformers' test files could not be fetched; the message says why."""


# How the skip reason of a common test that could not run starts (tests/conftest.py counts them in one summary line).
UNAVAILABLE_PREFIX = "transformers' common tests unavailable"


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "hf_longclip" / "transformers_tests"


def _download_sdist(version: str, dest: Path) -> Path:
    """`transformers-<version>.tar.gz` from `$HF_LONGCLIP_TRANSFORMERS_SDIST` or, with pip, the package index."""
    local = os.environ.get(SDIST_ENV)
    if local:
        path = Path(local).expanduser()
        if not path.is_file():
            raise CommonTestsUnavailable(f"{SDIST_ENV}={local} is not a file")
        return path
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
            "-q", "-d", str(dest), f"transformers=={version}"]
    # pip prepares the sdist's metadata; with the build backend already installed that skips a build environment.
    errors = []
    for extra in (["--no-build-isolation"], []):
        try:
            proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CommonTestsUnavailable(f"pip download transformers=={version} took over {DOWNLOAD_TIMEOUT_S} s")
        found = sorted(dest.glob(f"transformers-{version}.tar.gz"))
        if proc.returncode == 0 and found:
            return found[0]
        errors.append((proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"])
    raise CommonTestsUnavailable(
        f"could not download the transformers=={version} source distribution with pip: {errors[-1][0]}"
    )


def _build_package(sdist: Path, version: str, target: Path) -> None:
    """Write package `transformers_tests` (the sdist's test files and the stand-ins) under `target`."""
    package = target / PACKAGE
    package.mkdir(parents=True)
    wanted = {f"transformers-{version}/tests/{name}": name for name in SDIST_FILES}
    with tarfile.open(sdist) as tar:
        members = {member.name: member for member in tar.getmembers() if member.name in wanted}
        missing = sorted(set(wanted) - set(members))
        if missing:
            raise CommonTestsUnavailable(f"{sdist.name} lacks {', '.join(missing)}")
        for name, member in members.items():
            (package / wanted[name]).write_bytes(tar.extractfile(member).read())
    # test_configuration_common runs `direct_transformers_import(Path(__file__).parent)`, which needs __init__.py.
    (package / "__init__.py").write_text(
        f'"""transformers {version}\'s common tests, from its sdist (see tests/helpers/transformers_common.py)."""\n'
    )
    for relative, text in STAND_INS.items():
        path = package / relative
        path.parent.mkdir(exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)


def transformers_tests_dir(version: str | None = None) -> Path:
    """A directory holding package `transformers_tests` for transformers `version` (default: the installed one),
    fetched into the cache on first use. Raises `CommonTestsUnavailable` when that cannot be done."""
    version = version or transformers.__version__
    root = cache_root()
    final = root / f"{version}-layout{LAYOUT_VERSION}"
    if (final / PACKAGE / "__init__.py").is_file():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=root))
    except OSError as error:
        raise CommonTestsUnavailable(f"cannot write the cache directory {root}: {error}") from error
    try:
        sdist = _download_sdist(version, scratch / "download")
        _build_package(sdist, version, scratch / "tree")
        try:
            os.rename(scratch / "tree", final)  # atomic; fails if another process got there first
        except OSError:
            if not (final / PACKAGE / "__init__.py").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def common_tests() -> tuple[ModuleType, ModuleType]:
    """Import and return transformers' `test_modeling_common` and `test_configuration_common` for the installed
    version. Raises `CommonTestsUnavailable`, with the reason, where they cannot be had."""
    directory = transformers_tests_dir()
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None and Path(loaded.__file__).parent.parent != directory:
        raise RuntimeError(f"another {PACKAGE} package is already imported from {loaded.__file__}")
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    try:
        with warnings.catch_warnings():
            # Their tests carry marks that transformers' own pytest configuration registers (flash_attn_test, ...).
            warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
            return (importlib.import_module(f"{PACKAGE}.test_modeling_common"),
                    importlib.import_module(f"{PACKAGE}.test_configuration_common"))
    except ModuleNotFoundError as error:
        if error.name and error.name.split(".")[0] in (PACKAGE, "transformers"):
            raise
        raise CommonTestsUnavailable(
            f"they need the package {error.name!r} (`pip install -e .[dev]` installs it)"
        ) from error
