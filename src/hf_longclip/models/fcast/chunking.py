"""F-CAST's chunking of a long caption into N sub-captions (Sec. 3.2, App. C): the caption is split into sentences,
then consecutive sentences are joined into chunks. Training uses random chunking (1-3 sentences per chunk),
inference balanced chunking.

Sentences (`as_sentences`): each line, and each item of a list (a line starting with "-", "*", "•" or "1." / "1)",
the marker dropped; "•" inside a line too), is split after sentence punctuation (the splitter HiMo-CLIP's segments
use, `modeling_common.text.split_sentences`). With a `TokenBudget` (the processor passes its tokenizer's), a
sentence longer than a chunk holds (a caption without punctuation, a run-on list) is split between words into the
fewest pieces that fit, of near-equal token counts, and each piece counts as a sentence.

Balanced chunking keeps App. C's sizes (floor(L / N) sentences per chunk, the remainder to the first chunks) when
every chunk fits the budget; when one would not, the sentences are split into the N consecutive chunks whose
largest token count is the smallest (so a caption that fits N chunks is encoded whole, and one that does not loses
the least at each chunk's end). The processor warns when text is truncated, saying how much. N stays the model's:
stage 2 has learned positions for N chunks only (Eq. 3), so the count cannot adapt.

Imports only the standard library and `text`, so that F-CAST's processor carries it in its remote code."""

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from hf_longclip.modeling_common.text import split_sentences

MAX_SENTENCES_PER_CHUNK = 3  # App. C: "no chunk may contain more than three sentences"
_LIST_MARKER = re.compile(r"^\s*(?:[-*\u2022\u2023\u25e6]|\d{1,3}[.)])\s+")  # "- ", "* ", "• ", "1. ", "2) "
_INLINE_BULLET = re.compile(r"\s*[\u2022\u2023\u25e6]\s+")


@dataclass(frozen=True)
class TokenBudget:
    """What one chunk holds: `max_tokens` tokens (the context less the start and end tokens), counted by `count`
    (texts -> their token counts without special tokens; a tokenizer's, so counts of words add up)."""

    count: Callable[[list[str]], list[int]]
    max_tokens: int


def _check(num_sentences: int, num_chunks: int) -> None:
    if num_chunks < 1:
        raise ValueError(f"the number of chunks N must be >= 1, got {num_chunks}")
    if num_sentences < 1:
        raise ValueError("the caption has no sentence to chunk (empty or whitespace only)")


def balanced_chunk_sizes(num_sentences: int, num_chunks: int) -> list[int]:
    """Balanced chunking (App. C): floor(L / N) sentences per chunk, the remainder one each to the first chunks
    (L=6, N=4 -> [2, 2, 1, 1]; L=11, N=4 -> [3, 3, 3, 2]). With L < N this gives empty chunks: see
    `balanced_chunks` for what they receive."""
    _check(num_sentences, num_chunks)
    base, remainder = divmod(num_sentences, num_chunks)
    return [base + (index < remainder) for index in range(num_chunks)]


def random_chunk_sizes(num_sentences: int, num_chunks: int, rng: random.Random) -> list[int]:
    """Random chunking (App. C): each chunk takes 1, 2 or 3 consecutive sentences. With N <= L <= 3N the sizes sum
    to L (every sentence used; each size drawn uniformly among those that keep the rest feasible); with L > 3N each
    size is drawn from {1, 2, 3} and the sentences beyond their sum are dropped; with L < N every chunk takes one
    sentence (`random_chunks` resamples sentences to fill them)."""
    _check(num_sentences, num_chunks)
    if num_sentences < num_chunks:
        return [1] * num_chunks
    if num_sentences > MAX_SENTENCES_PER_CHUNK * num_chunks:
        return [rng.randint(1, MAX_SENTENCES_PER_CHUNK) for _ in range(num_chunks)]
    sizes, left = [], num_sentences
    for later in range(num_chunks - 1, -1, -1):  # `later` chunks come after this one
        low, high = max(1, left - MAX_SENTENCES_PER_CHUNK * later), min(MAX_SENTENCES_PER_CHUNK, left - later)
        sizes.append(rng.randint(low, high))
        left -= sizes[-1]
    return sizes


def _join(sentences: list[str], sizes: list[int]) -> list[str]:
    chunks, start = [], 0
    for size in sizes:
        chunks.append(" ".join(sentences[start:start + size]))
        start += size
    return chunks


def _split_by_tokens(sentence: str, budget: TokenBudget) -> list[str]:
    """`sentence` as pieces of whole words of at most `budget.max_tokens` tokens each (a single longer word stays
    one piece), as few as fit, filled to near-equal token counts."""
    words = sentence.split()
    counts = budget.count(words)
    total = sum(counts)
    if total <= budget.max_tokens or len(words) == 1:
        return [sentence]
    pieces, start, left = [], 0, total
    while start < len(words):
        wanted = -(-left // budget.max_tokens)  # pieces still needed: ceil(left / max_tokens)
        limit = min(budget.max_tokens, -(-left // wanted))
        end, size = start + 1, counts[start]
        while end < len(words) and size + counts[end] <= limit:
            size, end = size + counts[end], end + 1
        pieces.append(" ".join(words[start:end]))
        start, left = end, left - size
    return pieces


def as_sentences(caption: str | list[str], budget: TokenBudget | None = None) -> list[str]:
    """The sentences of a caption: a string is split into lines, list items and sentences (module docstring), a list
    is taken as sentences already split; with `budget`, a sentence longer than a chunk holds is split by tokens."""
    if isinstance(caption, str):
        sentences = [sentence for line in caption.splitlines() for item in _INLINE_BULLET.split(line)
                     for sentence in split_sentences(_LIST_MARKER.sub("", item))]
    else:
        sentences = [sentence.strip() for sentence in caption if sentence.strip()]
    if not sentences:
        raise ValueError(f"the caption {caption!r} has no sentence to chunk (empty or whitespace only)")
    if budget is None:
        return sentences
    return [piece for sentence in sentences for piece in _split_by_tokens(sentence, budget)]


def even_token_chunk_sizes(token_counts: list[int], num_chunks: int) -> list[int]:
    """Sizes (in sentences) of the split of consecutive sentences with `token_counts` into `num_chunks` non-empty
    chunks whose largest token count is the smallest (dynamic programming; ties to the earliest cut)."""
    _check(len(token_counts), num_chunks)
    if len(token_counts) < num_chunks:
        raise ValueError(f"{len(token_counts)} sentences cannot fill {num_chunks} non-empty chunks")
    prefix, length = [0, *accumulate(token_counts)], len(token_counts)
    best = [[float("inf")] * (length + 1) for _ in range(num_chunks + 1)]
    cut = [[0] * (length + 1) for _ in range(num_chunks + 1)]
    best[0][0] = 0
    for chunks in range(1, num_chunks + 1):
        for end in range(chunks, length - (num_chunks - chunks) + 1):
            for start in range(chunks - 1, end):
                largest = max(best[chunks - 1][start], prefix[end] - prefix[start])
                if largest < best[chunks][end]:
                    best[chunks][end], cut[chunks][end] = largest, start
    sizes, end = [], length
    for chunks in range(num_chunks, 0, -1):
        sizes.append(end - cut[chunks][end])
        end = cut[chunks][end]
    return sizes[::-1]


def balanced_chunks(caption: str | list[str], num_chunks: int, budget: TokenBudget | None = None) -> list[str]:
    """N sub-captions by balanced chunking (inference; with `budget`, token-aware as the module docstring says). A
    caption of L < N sentences repeats them in order (sentence k mod L in chunk k): deterministic, every chunk holds
    a real sentence, as random chunking resamples sentences in training (the paper does not say for inference)."""
    sentences = as_sentences(caption, budget)
    if len(sentences) < num_chunks:
        return [sentences[index % len(sentences)] for index in range(num_chunks)]
    sizes = balanced_chunk_sizes(len(sentences), num_chunks)
    if budget is not None:
        counts = budget.count(sentences)
        ends = list(accumulate(sizes))
        if any(sum(counts[end - size:end]) > budget.max_tokens for size, end in zip(sizes, ends)):
            sizes = even_token_chunk_sizes(counts, num_chunks)
    return _join(sentences, sizes)


def random_chunks(caption: str | list[str], num_chunks: int, rng: random.Random,
                  budget: TokenBudget | None = None) -> list[str]:
    """N sub-captions by random chunking (training, `random_chunk_sizes`; with `budget`, sentences longer than a
    chunk split by tokens first). With L < N the L sentences fill the first chunks and the others are sentences
    drawn at random with replacement (App. C)."""
    sentences = as_sentences(caption, budget)
    if len(sentences) < num_chunks:
        extra = [rng.choice(sentences) for _ in range(num_chunks - len(sentences))]
        return sentences + extra
    return _join(sentences, random_chunk_sizes(len(sentences), num_chunks, rng))


def sample_sub_captions(captions: list[str | list[str]], num_chunks: int, num_sub_captions: int,
                        rng: random.Random, budget: TokenBudget | None = None) -> list[str]:
    """K sub-captions of one image (Sec. 3.3): the first N are the random chunks of `captions[0]` (the long caption
    stage 2 encodes), each of the other K - N is one random chunk of one of the image's other captions drawn at
    random (of `captions[0]` again when it has no other); `budget` as `random_chunks`."""
    if num_sub_captions < num_chunks:
        raise ValueError(f"K = {num_sub_captions} sub-captions per image is smaller than N = {num_chunks} chunks: "
                         "the first N sub-captions are the chunks of the long caption")
    subs = random_chunks(captions[0], num_chunks, rng, budget)
    others = list(captions[1:]) or list(captions[:1])
    for _ in range(num_sub_captions - num_chunks):
        subs.append(rng.choice(random_chunks(rng.choice(others), num_chunks, rng, budget)))
    return subs


__all__ = ["MAX_SENTENCES_PER_CHUNK", "TokenBudget", "as_sentences", "balanced_chunk_sizes", "balanced_chunks",
           "even_token_chunk_sizes", "random_chunk_sizes", "random_chunks", "sample_sub_captions"]
