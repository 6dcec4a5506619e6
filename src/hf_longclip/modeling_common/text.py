"""Sentence splitting of captions, shared by F-CAST's chunking (a processor's, so part of its remote code) and the
data code (HiMo-CLIP's cumulative segments, the benchmarks' loaders). Imports only the standard library."""

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` after ``.``, ``!`` or ``?`` followed by whitespace, keeping the punctuation.

    A plain regex splitter (no nltk), as used to build HiMo@K prefixes (HiMo-CLIP Sec. 4.2).
    Sentences are stripped and empty ones dropped.
    """
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]
