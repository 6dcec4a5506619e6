"""Captions read from a user's files: text encoding, control characters, and the once-per-run report of captions
cut by truncation.

* Encoding: a CSV / JSON Lines / JSON file of captions must be UTF-8 (a byte-order mark is allowed). One that is not
  is refused before anything is read, naming the file, the line and the byte (`check_utf8`), not decoded with
  replacement characters: a file that is not UTF-8 is nearly always wholly in another encoding (cp1252 from a
  spreadsheet, Latin-1), so replacing the bad bytes would silently damage every accented caption, not one.
* Control characters (`clean_caption`): C0 / C1 control characters other than tab and line breaks (NUL, ESC, DEL,
  ...; scraped alt-texts carry them) become spaces, and the caption is stripped; counted (`captions_cleaned`).
* Empty or whitespace-only captions (also after cleaning) and missing ones are bad samples (reasons `empty
  caption`, `no caption`) under the one policy of `data.image_files` (skip and count, or error naming the id).
* Truncation: the processors count the texts they cut (`truncation_stats`); `describe_truncation` is the one line a
  run logs about them.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

_KEPT_CONTROLS = frozenset("\t\n\r")


def clean_caption(text: str) -> str:
    """`text` with its control characters (Unicode category Cc, except tab and line breaks) replaced by spaces,
    stripped."""
    if any(unicodedata.category(char) == "Cc" and char not in _KEPT_CONTROLS for char in text):
        text = "".join(" " if unicodedata.category(char) == "Cc" and char not in _KEPT_CONTROLS else char
                       for char in text)
    return text.strip()


def check_utf8(path: str | Path) -> None:
    """Raise ValueError naming `path`, the line, column and byte where it stops being UTF-8 text."""
    path = Path(path)
    data = path.read_bytes()
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        offset = error.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, offset) + 1
        column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
        byte = data[offset:offset + 1]
        raise ValueError(
            f"{path}: line {line}, column {column}: byte 0x{byte.hex()} is not UTF-8 ({error.reason}): captions files "
            f"must be UTF-8; convert it first, e.g. `iconv -f cp1252 -t utf-8 {path.name} > utf8-{path.name}`"
        ) from None


def describe_truncation(stats: dict | None, what: str = "texts") -> str:
    """One line about `stats` (`modeling_common.captions.new_truncation_stats`): how many texts were cut at how many
    tokens, and by how much."""
    if not stats or not stats.get("texts"):
        return f"no {what} tokenized"
    limit = stats.get("max_length")
    at = f" at {limit} tokens" if limit else ""
    if not stats["truncated"]:
        return f"none of {stats['texts']} {what} cut{at}"
    return (f"{stats['truncated']} of {stats['texts']} {what} cut{at}: {stats['tokens_cut']} tokens lost in all, "
            f"{stats['tokens_cut'] / stats['truncated']:.1f} per cut text on average, {stats['max_tokens_cut']} at "
            f"most")


__all__ = ["check_utf8", "clean_caption", "describe_truncation"]
