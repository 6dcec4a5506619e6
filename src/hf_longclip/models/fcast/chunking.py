"""F-CAST's chunking of a long caption into N sub-captions (Sec. 3.2, App. C): the caption is split into sentences
(the splitter HiMo-CLIP's segments use, `modeling_common.text.split_sentences`), then consecutive sentences are
joined into chunks. Training uses random chunking (1-3 sentences per chunk), inference balanced chunking.

Imports only the standard library and `text`, so that F-CAST's processor carries it in its remote code."""

import random

from hf_longclip.modeling_common.text import split_sentences

MAX_SENTENCES_PER_CHUNK = 3  # App. C: "no chunk may contain more than three sentences"


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


def as_sentences(caption: str | list[str]) -> list[str]:
    """The sentences of a caption (a string, split with `split_sentences`, or a list of sentences already split)."""
    sentences = split_sentences(caption) if isinstance(caption, str) else [s.strip() for s in caption if s.strip()]
    if not sentences:
        raise ValueError(f"the caption {caption!r} has no sentence to chunk (empty or whitespace only)")
    return sentences


def balanced_chunks(caption: str | list[str], num_chunks: int) -> list[str]:
    """N sub-captions by balanced chunking (inference). A caption of L < N sentences repeats them in order (sentence
    k mod L in chunk k): deterministic, and every chunk holds a real sentence (the paper does not say)."""
    sentences = as_sentences(caption)
    if len(sentences) < num_chunks:
        return [sentences[index % len(sentences)] for index in range(num_chunks)]
    return _join(sentences, balanced_chunk_sizes(len(sentences), num_chunks))


def random_chunks(caption: str | list[str], num_chunks: int, rng: random.Random) -> list[str]:
    """N sub-captions by random chunking (training, `random_chunk_sizes`). With L < N the L sentences fill the first
    chunks and the others are sentences drawn at random with replacement (App. C)."""
    sentences = as_sentences(caption)
    if len(sentences) < num_chunks:
        extra = [rng.choice(sentences) for _ in range(num_chunks - len(sentences))]
        return sentences + extra
    return _join(sentences, random_chunk_sizes(len(sentences), num_chunks, rng))


def sample_sub_captions(captions: list[str | list[str]], num_chunks: int, num_sub_captions: int,
                        rng: random.Random) -> list[str]:
    """K sub-captions of one image (Sec. 3.3): the first N are the random chunks of `captions[0]` (the long caption
    stage 2 encodes), each of the other K - N is one random chunk of one of the image's other captions drawn at
    random (of `captions[0]` again when it has no other)."""
    if num_sub_captions < num_chunks:
        raise ValueError(f"K = {num_sub_captions} sub-captions per image is smaller than N = {num_chunks} chunks: "
                         "the first N sub-captions are the chunks of the long caption")
    subs = random_chunks(captions[0], num_chunks, rng)
    others = list(captions[1:]) or list(captions[:1])
    for _ in range(num_sub_captions - num_chunks):
        subs.append(rng.choice(random_chunks(rng.choice(others), num_chunks, rng)))
    return subs


__all__ = ["MAX_SENTENCES_PER_CHUNK", "as_sentences", "balanced_chunk_sizes", "balanced_chunks",
           "random_chunk_sizes", "random_chunks", "sample_sub_captions"]
