"""Every dotted path into the package (`hf_longclip.<module>.<name>`) that a docstring, a comment or a page names
resolves: a module of the package, or an attribute of one (`<arch>` stands for a model folder: the path resolves for
at least one). Read: the docstrings and comments of the Python files of src/, examples/, benchmarks/, scripts/ and
tests/, and the whole text of docs/, model_cards/ and README.md. A path whose module needs an extra that is not
installed is not checked."""

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

from hf_longclip.models import MODEL_FOLDERS

REPO = Path(__file__).resolve().parents[1]
PYTHON_ROOTS = ("src", "examples", "benchmarks", "scripts", "tests")
PAGE_ROOTS = ("docs", "model_cards", "README.md")
DOTTED = re.compile(r"\bhf_longclip(?:\.(?:[A-Za-z_]\w*|<arch>))+")
FILE_SUFFIXES = {"json", "md", "py", "txt", "yaml"}  # `hf_longclip.json`: a file's name, not a path


def _python_texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file."""
    source = path.read_text(encoding="utf-8")
    texts = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if (docstring := ast.get_docstring(node, clean=False)) is not None:
                texts.append((node.body[0].lineno, docstring))
    return texts


def _mentions() -> dict[str, list[str]]:
    """Dotted path -> where it is named ("file:line")."""
    sources = []
    for root in PYTHON_ROOTS:
        sources += [(path, _python_texts(path)) for path in sorted((REPO / root).rglob("*.py"))]
    for root in PAGE_ROOTS:
        pages = [REPO / root] if (REPO / root).is_file() else sorted((REPO / root).rglob("*.md"))
        sources += [(page, [(1, page.read_text(encoding="utf-8"))]) for page in pages]
    mentions = {}
    for path, texts in sources:
        for line, text in texts:
            for match in DOTTED.finditer(text):
                if match[0].rsplit(".", 1)[1] not in FILE_SUFFIXES:
                    where = f"{path.relative_to(REPO)}:{line + text.count(chr(10), 0, match.start())}"
                    mentions.setdefault(match[0], []).append(where)
    return mentions


def _resolves(dotted: str) -> bool:
    """Whether `dotted` names a module or an attribute of one (True where its module needs a missing extra)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError as error:
            if not (error.name or "").startswith("hf_longclip"):
                return True  # an extra's package: the module is there, its names cannot be read here
            continue
        for name in parts[end:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_dotted_path_in_docstrings_and_docs_resolves():
    mentions = _mentions()
    assert "hf_longclip.recipes.<arch>.task" in mentions  # the scan reads docstrings (training/task.py's)
    broken = {dotted: where for dotted, where in mentions.items()
              if not any(_resolves(dotted.replace("<arch>", arch)) for arch in MODEL_FOLDERS)}
    assert not broken, "paths that name nothing:\n" + "\n".join(f"{d} ({', '.join(w)})" for d, w in broken.items())
