"""F-CAST chunking never drops or repeats text silently (issue 31): a caption without sentence punctuation is split
by tokens, lines and list items are sentences, chunks that App. C's sentence counts would overflow are rebalanced by
tokens, and text beyond what the N chunks hold is truncated with a warning that says how much. The issue's probes:
a 220-token caption without periods, a bullet list, 13 sentences of 600 tokens."""

import random
import warnings

import pytest

from hf_longclip import CASTImageProcessor, FCASTProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.models.fcast.chunking import as_sentences, even_token_chunk_sizes, random_chunks
from hf_longclip.models.fcast.processing_fcast import ChunkTruncationWarning

WORDS = [f"w{i}" for i in range(700)]  # one token each under the word-level tokenizer


@pytest.fixture(scope="module")
def processor() -> FCASTProcessor:
    tokenizer = train_scene_tokenizer([" ".join(WORDS) + " ."], model_max_length=77)
    return FCASTProcessor(CASTImageProcessor(size=32, num_segments=16), tokenizer, max_length=77)


def encoded_chunks(processor, caption: str) -> tuple[list[list[str]], list]:
    """The words each chunk's tokens hold after tokenization at 77 (special and padding tokens left out), and the
    warnings raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = processor(text=caption)["input_ids"][0]
    special = set(processor.tokenizer.all_special_ids)
    chunks = [[processor.tokenizer.convert_ids_to_tokens(int(i)) for i in row if int(i) not in special] for row in ids]
    return chunks, [w for w in caught if issubclass(w.category, ChunkTruncationWarning)]


def test_a_caption_without_periods_is_split_by_tokens_and_encoded_whole(processor):
    caption = " ".join(WORDS[:220])
    chunks, caught = encoded_chunks(processor, caption)
    assert [len(chunk) for chunk in chunks] == [74, 73, 73, 74]  # before: 4 copies of the first 75 tokens
    assert sum(chunks[:3], []) == WORDS[:220] and not caught  # every token once, in order
    assert chunks[3] == chunks[0]  # L = 3 < N = 4 pieces: App. C's rule for L < N (a sentence again)


@pytest.mark.parametrize("marker", ["- ", "* ", "\u2022 ", "{}. ", "{}) ", ""])
def test_list_items_and_lines_are_sentences(processor, marker):
    items = [WORDS[10 * i:10 * i + 9] for i in range(8)]
    caption = "A list:\n" + "\n".join(marker.format(i + 1) + " ".join(item) for i, item in enumerate(items))
    assert as_sentences(caption) == ["A list:", *(" ".join(item) for item in items)]
    chunks, caught = encoded_chunks(processor, caption.replace("A list:\n", ""))
    assert chunks == [items[0] + items[1], items[2] + items[3], items[4] + items[5], items[6] + items[7]]
    assert not caught
    assert as_sentences("one two \u2022 three \u2022 four. five") == ["one two", "three", "four.", "five"]


def test_text_beyond_the_chunks_is_truncated_with_a_warning_saying_how_much(processor):
    sentences = [" ".join(WORDS[46 * i:46 * i + 45]) + " ." for i in range(13)]  # 13 x 46 = 598 tokens
    chunks, caught = encoded_chunks(processor, " ".join(sentences))
    assert [len(chunk) for chunk in chunks] == [75] * 4  # every chunk full: the most 4 x 75 tokens can hold
    assert len(caught) == 1
    assert str(caught[0].message) == ("1 of 1 captions hold more tokens than F-CAST's 4 chunks of 75: 298 of their "
                                      "598 tokens are truncated (caption 0: 298 of 598)")


def test_chunks_the_papers_sentence_counts_would_overflow_are_rebalanced_by_tokens(processor):
    lengths = [70, 10, 10, 10, 70, 10, 10, 10]  # App. C's 2 sentences per chunk: 80, 20, 80, 20 tokens
    words, sentences = iter(WORDS), []
    for length in lengths:
        sentences.append(" ".join(next(words) for _ in range(length - 1)) + " .")
    chunks, caught = encoded_chunks(processor, " ".join(sentences))
    assert [len(chunk) for chunk in chunks] == [70, 30, 70, 30] and not caught
    assert sum(chunks, []) == " ".join(sentences).split()


@pytest.mark.parametrize("counts, num_chunks, sizes", [
    ([5, 1, 1, 1, 5], 3, [1, 3, 1]),  # largest chunk 5, not 6 or 7
    ([1, 1, 1, 1], 4, [1, 1, 1, 1]),
    ([3, 3, 3, 3, 3, 3], 2, [3, 3]),
    ([10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2, [1, 10]),
])
def test_even_token_sizes_minimise_the_largest_chunk(counts, num_chunks, sizes):
    assert even_token_chunk_sizes(counts, num_chunks) == sizes


def test_random_chunking_in_training_splits_by_tokens_too(processor):
    caption = " ".join(WORDS[:220])
    for seed in range(5):
        chunks = random_chunks(caption, 4, random.Random(seed), processor.token_budget)
        assert " ".join(chunks[:3]).split() == WORDS[:220]  # the 3 pieces, then one resampled (App. C, L < N)
        assert chunks[3] in chunks[:3]
    assert random_chunks(caption, 4, random.Random(0))[0] == caption  # without a budget: one sentence, as before
