"""The remote code uses transformers' public API only, so that a checkpoint keeps loading as transformers changes
(docs/compatibility.md): every transformers module it imports from is one whose path transformers documents, no
name it imports starts with an underscore, and every underscore attribute it reads or calls is its own, torch's, or
one of the model hooks transformers documents for writing a model."""

import ast
from pathlib import Path

import pytest

MODELING = Path(__file__).resolve().parents[2] / "modeling"
FILES = sorted(MODELING.glob("*.py"))
TRANSFORMERS_MODULES = {
    "transformers", "transformers.activations", "transformers.configuration_utils",
    "transformers.image_processing_utils", "transformers.image_utils",
    "transformers.initialization", "transformers.modeling_layers", "transformers.modeling_outputs",
    "transformers.models.clip.modeling_clip", "transformers.utils",
    "transformers.modeling_utils",  # `no_init_weights`, 4.57's home of it (transformers_compat.py)
}
# hooks a model defines (or chains to its parent's) as transformers' guide to custom models documents them
MODEL_HOOKS = {"_init_weights", "_no_split_modules", "_supports_sdpa", "_keys_to_ignore_on_load_unexpected"}
TORCH_PRIVATE = {"_assert_async", "_subclasses", "_modules"}  # torch's, not transformers'


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


def _own_names() -> set[str]:
    """Every name the bundle defines: functions, classes, attributes it assigns."""
    names = set()
    for path in FILES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_imports_from_transformers_are_public(path):
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            assert node.module in TRANSFORMERS_MODULES, f"{path.name}:{node.lineno} imports from {node.module}"
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            assert not private, f"{path.name}:{node.lineno} imports {private} from {node.module}"
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith("transformers.") for alias in node.names), path.name


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_underscore_attributes_are_the_bundles_own(path):
    allowed = _own_names() | MODEL_HOOKS | TORCH_PRIVATE
    used = {(node.attr, node.lineno) for node in ast.walk(_tree(path))
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")}
    foreign = sorted((name, line) for name, line in used if name not in allowed)
    assert not foreign, f"{path.name} uses underscore names that are neither its own nor documented hooks: {foreign}"
