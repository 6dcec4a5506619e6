"""Generate `modeling/<arch>/`: the remote-code bundle of each model, exactly the code `save_pretrained` writes next
to its weights (see `hf_longclip.modeling_common.code_bundle` for how a bundle is made and why)."""

from pathlib import Path

from .modeling_common.code_bundle import bundle_sources
from .models import MODEL_FOLDERS

SOURCE_ROOT = Path(__file__).parent / "models"
# A model folder's remote-code modules; the rest (`__init__.py`, `evaluation.py`) stays library-side.
REMOTE_CODE_PREFIXES = ("configuration_", "modeling_", "processing_", "image_processing_")


def model_bundle(arch: str) -> dict[str, str]:
    """File name -> text of a model's bundle: its configuration, modeling and processing modules and every library
    module they import."""
    entry_points = sorted(p for p in (SOURCE_ROOT / arch).glob("*.py") if p.name.startswith(REMOTE_CODE_PREFIXES))
    if not entry_points:
        raise FileNotFoundError(f"no model code under {SOURCE_ROOT / arch}")
    return bundle_sources(*entry_points)


def stale_files(destination: Path) -> list[str]:
    """Paths under `destination` that differ from a fresh export (missing, changed or left over)."""
    stale = []
    for arch in MODEL_FOLDERS:
        expected, folder = model_bundle(arch), Path(destination) / arch
        present = {p.name for p in folder.glob("*.py")} if folder.is_dir() else set()
        for name in sorted(present | set(expected)):
            path = folder / name
            if name not in expected or not path.is_file() or path.read_text(encoding="utf-8") != expected[name]:
                stale.append(str(path))
    return stale


def export_code(destination: Path) -> list[Path]:
    """Write each model's bundle to `destination/<arch>/`, replacing the Python files that were there."""
    written = []
    for arch in MODEL_FOLDERS:
        target = Path(destination) / arch
        target.mkdir(parents=True, exist_ok=True)
        for old in target.glob("*.py"):
            old.unlink()
        for name, text in model_bundle(arch).items():
            (target / name).write_text(text, encoding="utf-8")
            written.append(target / name)
    return written
