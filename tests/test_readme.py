"""Every ```python block of README.md and docs/**/*.md runs as written, in a fresh interpreter, offline, from an
empty working directory (so a block that writes relative paths cannot litter the repository), and prints what it
shows; every relative link of those pages points at a file of the repository."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_longclip.models import MODEL_FOLDERS

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")
BLOCKS = [(page, index, block) for page in PAGES
          for index, block in enumerate(PYTHON_BLOCK.findall(page.read_text()))]


def _name(page: Path) -> str:
    return str(page.relative_to(REPO))


def test_the_pages_have_their_python_blocks():
    counts = {_name(page): 0 for page in PAGES}
    for page, _, _ in BLOCKS:
        counts[_name(page)] += 1
    assert counts["README.md"] >= 3, counts
    for model in MODEL_FOLDERS:  # every model has its page
        assert counts[f"docs/models/{model}.md"] >= 1, counts


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_point_at_files(page):
    missing = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the same page
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{_name(page)} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page, index, block", BLOCKS, ids=[f"{_name(page)}:{index}" for page, index, _ in BLOCKS])
def test_python_block_runs_as_written(page, index, block, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{_name(page)}, block {index}:\n{block}\n{result.stderr[-4000:]}"
    assert result.stdout.strip(), f"{_name(page)}, block {index} prints nothing: every block prints what it shows"
