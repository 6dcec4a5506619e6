"""Generate `modeling/<arch>/`: the Hub-ready code bundle of each model, as `save_pretrained` writes it."""

import shutil
from pathlib import Path

from .models import MODEL_FOLDERS

SOURCE_ROOT = Path(__file__).parent / "models"


def bundle_files(arch: str) -> list[Path]:
    """The remote-code files of a model: every configuration/modeling/processing module of its folder."""
    files = sorted(p for p in (SOURCE_ROOT / arch).glob("*.py") if p.name != "__init__.py")
    if not files:
        raise FileNotFoundError(f"no model code under {SOURCE_ROOT / arch}")
    return files


def export_code(destination: Path) -> list[Path]:
    """Copy each model's remote-code files to `destination/<arch>/`, replacing what was there."""
    written = []
    for arch in MODEL_FOLDERS:
        target = Path(destination) / arch
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for source in bundle_files(arch):
            written.append(Path(shutil.copyfile(source, target / source.name)))
    return written
