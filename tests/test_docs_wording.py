"""User docs speak to users: README.md, docs/**/*.md and the model cards carry no words of the workshop that wrote
them (issue numbers, the GPU lending and session vocabulary, names of internal restructurings)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
         *sorted((REPO / "src" / "hf_longclip" / "models").glob("*/model_card.md"))]
WORKSHOP = re.compile(
    r"\bissues? #?\d+|\bPR #?\d+|\blent\b|\bdevice time\b|\bsessions?\b|\bworkshop\b|\bpaper set\b|"
    r"\bthis machine\b|\bown room\b",
    flags=re.IGNORECASE,
)


def findings(text: str) -> list[str]:
    """Each line of `text` that holds a workshop word, as 'line N: ...'."""
    return [f"line {number}: {match[0]!r} in {line.strip()[:100]!r}"
            for number, line in enumerate(text.splitlines(), 1) for match in [WORKSHOP.search(line)] if match]


@pytest.mark.parametrize("phrase", [
    "as issue 32 showed", "see issue #7", "the lent device time", "on this machine", "each model in its own room",
    "the project's paper set", "in this session", "fixed in PR 12",
])
def test_the_pattern_catches_workshop_words(phrase):
    assert findings(f"Some text.\nThen {phrase}, and more.")[0].startswith("line 2:")


@pytest.mark.parametrize("phrase", ["known issues of truncation", "a 2-core machine", "R@1 of 39.5", "Table 4 row 2",
                                    "the device (cuda or cpu)", "test helpers"])
def test_the_pattern_leaves_ordinary_words(phrase):
    assert findings(phrase) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_user_docs_have_no_workshop_words(page):
    assert findings(page.read_text()) == [], f"{page.relative_to(REPO)} speaks to the workshop, not to users"
