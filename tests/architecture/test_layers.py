"""The import graph points one way: examples and the CLI -> the harness (recipes, miniature and integrations, then
training and evaluation, then objectives, data, metrics) -> the models -> the shared modelling code. Read from the
source's imports (every `import` statement, nested ones included), so a wrong arrow fails here before anyone imports
it."""

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "hf_longclip"
EXAMPLES = SRC.parents[1] / "examples"

# a module may import its own layer and those below it, never one above
LAYERS = {
    "modeling_common": 0,
    "models": 1, "export": 1, "versions": 1,
    "objectives": 2, "metrics": 2, "data": 2, "fileio": 2, "plots": 2,
    "evaluation": 3, "training": 3,
    # the adapters to other tools: CLIP_benchmark's and MTEB's run our evaluation's loading and encoding
    "recipes": 4, "miniature": 4, "integrations": 4,
    "demo": 5, "cli": 5, "__init__": 5,
}
# what the model layer may import besides the standard library and itself (issue: a lean install); cv2/skimage only
# inside CAST's superpixel functions, through `modeling_common.optional.require`
MODEL_LAYER_THIRD_PARTY = {"torch", "transformers", "safetensors", "huggingface_hub", "numpy", "PIL", "tokenizers",
                           "cv2", "skimage"}
HARNESS_LIBRARIES = {"accelerate", "datasets", "evaluate", "peft", "faiss", "gradio", "deepspeed", "torchdata",
                     "braceexpand", "matplotlib"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `path`, relative imports resolved."""
    package = path.relative_to(SRC.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            # `from package import submodule` names a module too
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "hf_longclip":
        return None
    if len(parts) == 1 or not ((SRC / parts[1]).is_dir() or (SRC / f"{parts[1]}.py").is_file()):
        return "__init__"  # the package's public names (`from hf_longclip import HiMoCLIPModel`)
    assert parts[1] in LAYERS, f"hf_longclip.{parts[1]} is in no layer: add it to LAYERS"
    return parts[1]


def _library_modules():
    return sorted(p for p in SRC.rglob("*.py") if "evaluate_modules" not in p.parts)


@pytest.mark.parametrize("path", _library_modules(), ids=lambda p: p.relative_to(SRC).as_posix())
def test_no_import_points_up(path):
    own = _layer(".".join(path.relative_to(SRC.parent).with_suffix("").parts))
    upward = [f"line {line}: {module}" for line, module in _imports(path)
              if (layer := _layer(module)) is not None and LAYERS[layer] > LAYERS[own]]
    assert not upward, f"{path.relative_to(SRC)} ({own}) imports a layer above it: {upward}"


@pytest.mark.parametrize("path", sorted((SRC / "metrics").rglob("*.py")), ids=lambda p: p.relative_to(SRC).as_posix())
def test_metrics_hold_pure_functions_and_their_evaluate_modules(path):
    """metrics/ imports nothing of the library but itself (install.py also the atomic file writer): the pure metric
    functions, the tie rules they credit by, and the `evaluate` scripts over them; tasks, encoding and reports are
    evaluation's."""
    allowed = ("hf_longclip.metrics", "hf_longclip.fileio") if path.name == "install.py" else ("hf_longclip.metrics",)
    wrong = [f"line {line}: {module}" for line, module in _imports(path)
             if module.startswith("hf_longclip") and not module.startswith(allowed)]
    assert not wrong, f"{path.relative_to(SRC)} imports beyond the metrics: {wrong}"


MODEL_LAYER = sorted((SRC / "models").rglob("*.py")) + sorted((SRC / "modeling_common").rglob("*.py"))


@pytest.mark.parametrize("path", MODEL_LAYER, ids=lambda p: p.relative_to(SRC).as_posix())
def test_the_model_layer_imports_only_what_loading_a_model_needs(path):
    allowed = MODEL_LAYER_THIRD_PARTY | set(sys.stdlib_module_names)
    wrong = [f"line {line}: {module}" for line, module in _imports(path)
             if (top := module.split(".")[0]) != "hf_longclip" and top not in allowed]
    assert not wrong, f"{path.relative_to(SRC)} imports beyond the model layer's dependencies: {wrong}"
    if "modeling_common" in path.parts:  # shared code serves every model: it names no model folder
        assert not [module for _, module in _imports(path) if _layer(module) == "models"]


def test_a_model_folder_holds_its_architecture_and_converter_only():
    """`models/<arch>/` holds configuration, modeling, (image) processing, the converter of its family's checkpoints
    and the modules those import alone (CAST's segments, F-CAST's chunking and pooling); what trains it is in
    `recipes/<arch>/`."""
    from hf_longclip.export import model_bundle
    from hf_longclip.models import MODEL_FOLDERS

    for arch in MODEL_FOLDERS:
        bundled = set(model_bundle(arch))
        for path in (SRC / "models" / arch).glob("*.py"):
            converter = path.name.startswith(("convert_", "export_"))
            assert path.name == "__init__.py" or path.name in bundled or converter, \
                f"models/{arch}/{path.name} is neither remote code nor a converter"
        assert (SRC / "recipes" / arch / "task.py").is_file()


def test_the_scripts_import_only_the_public_harness():
    """examples/train_<arch>.py import `hf_longclip` (the models), `hf_longclip.recipes` (the shared harness),
    `hf_longclip.miniature` (the synthetic scenes' scaffolding) and recipe folders' public names
    (`hf_longclip.recipes.<arch>`), never a module inside the harness."""
    public = {"hf_longclip", "hf_longclip.recipes", "hf_longclip.miniature"}
    for script in sorted(EXAMPLES.glob("train_*.py")):
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hf_longclip"):
                assert node.module in public or node.module.startswith("hf_longclip.recipes."), \
                    f"{script.name} line {node.lineno}: {node.module} is not the public harness"
                if node.module.startswith("hf_longclip.recipes."):
                    assert node.module.count(".") == 2, f"{script.name}: {node.module} (import the folder's names)"
            elif isinstance(node, ast.Import):
                assert not any(alias.name.startswith("hf_longclip") for alias in node.names), script.name
