"""F-CAST chunking (App. C) and `FCASTProcessor`: balanced chunking's worked examples, random chunking's constraints
(1-3 consecutive sentences per chunk, surplus dropped when L > 3N, resampling when L < N), the K sub-captions of
training, and the clear errors."""

import random

import numpy as np
import pytest
import torch
from PIL import Image

from hf_longclip import CASTImageProcessor, FCASTProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.modeling_common.text import split_sentences
from hf_longclip.models.fcast.chunking import (
    balanced_chunk_sizes,
    balanced_chunks,
    random_chunk_sizes,
    random_chunks,
    sample_sub_captions,
)

SENTENCES = [f"Sentence number {i} here." for i in range(12)]


@pytest.mark.parametrize("num_sentences, sizes", [(6, [2, 2, 1, 1]), (11, [3, 3, 3, 2]), (4, [1, 1, 1, 1]),
                                                  (8, [2, 2, 2, 2]), (13, [4, 3, 3, 3])])
def test_balanced_sizes_are_the_papers(num_sentences, sizes):
    assert balanced_chunk_sizes(num_sentences, 4) == sizes


def test_balanced_chunks_join_consecutive_sentences():
    chunks = balanced_chunks(" ".join(SENTENCES[:6]), 4)
    assert chunks == [" ".join(SENTENCES[0:2]), " ".join(SENTENCES[2:4]), SENTENCES[4], SENTENCES[5]]
    assert balanced_chunks(SENTENCES[:2], 4) == [SENTENCES[0], SENTENCES[1], SENTENCES[0], SENTENCES[1]]


def test_balanced_uses_the_shared_sentence_splitter():
    caption = "A red circle. A blue square!  Is it small? Yes."
    assert split_sentences(caption) == ["A red circle.", "A blue square!", "Is it small?", "Yes."]
    assert balanced_chunks(caption, 4) == split_sentences(caption)


@pytest.mark.parametrize("num_sentences", range(4, 13))
def test_random_sizes_cover_every_sentence_between_n_and_3n(num_sentences):
    rng, seen = random.Random(0), set()
    for _ in range(200):
        sizes = random_chunk_sizes(num_sentences, 4, rng)
        assert len(sizes) == 4 and all(1 <= s <= 3 for s in sizes) and sum(sizes) == num_sentences
        seen.add(tuple(sizes))
    if 4 < num_sentences < 12:
        assert len(seen) > 1  # random, not a fixed split


def test_random_chunks_drop_the_surplus_beyond_3n():
    sentences = SENTENCES + ["One more.", "And another."]  # L = 14 > 3N = 12
    for seed in range(50):
        sizes = random_chunk_sizes(14, 4, random.Random(seed))
        assert len(sizes) == 4 and all(1 <= s <= 3 for s in sizes)
        chunks = random_chunks(sentences, 4, random.Random(seed))
        assert " ".join(chunks) == " ".join(sentences[: sum(sizes)])  # the first sum(sizes) <= 12, in order
        assert "And another." not in " ".join(chunks)


def test_random_chunks_are_consecutive_in_order():
    chunks = random_chunks(SENTENCES[:9], 4, random.Random(3))
    assert " ".join(chunks) == " ".join(SENTENCES[:9])


def test_random_chunks_resample_with_replacement_when_too_few_sentences():
    chunks = random_chunks(SENTENCES[:2], 4, random.Random(0))
    assert chunks[:2] == SENTENCES[:2] and set(chunks[2:]) <= set(SENTENCES[:2]) and len(chunks) == 4


def test_sub_captions_first_n_from_the_long_caption():
    captions = [" ".join(SENTENCES[:8]), "Other wording one. Other two.", "Third caption here."]
    subs = sample_sub_captions(captions, 4, 8, random.Random(0))
    assert len(subs) == 8 and " ".join(subs[:4]) == captions[0]
    others = set(split_sentences(captions[1])) | set(split_sentences(captions[2])) | set(captions[1:])
    assert all(set(split_sentences(s)) <= others for s in subs[4:])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="no sentence"):
        balanced_chunks("   ", 4)
    with pytest.raises(ValueError, match="no sentence"):
        random_chunks([], 4, random.Random(0))
    with pytest.raises(ValueError, match="K = 3 .* smaller than N = 4"):
        sample_sub_captions(["A. B. C. D."], 4, 3, random.Random(0))
    with pytest.raises(ValueError, match="N must be >= 1"):
        balanced_chunk_sizes(3, 0)


@pytest.fixture(scope="module")
def processor():
    tokenizer = train_scene_tokenizer([" ".join(SENTENCES), "a b c d e f g h i j k l m n o p q r s t u v w x y z"],
                                      model_max_length=77)
    return FCASTProcessor(CASTImageProcessor(size=32, num_segments=16), tokenizer, max_length=12)


def test_processor_chunks_tokenizes_and_computes_superpixels(processor):
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8))
    long_caption = " ".join(SENTENCES[:6]) + " " + " ".join("abcdefghijklmnopqrstuvwxyz") + "."
    out = processor(text=[long_caption, " ".join(SENTENCES[:4])], images=[image, image])
    assert out["input_ids"].shape == (2, 4, 12) and out["attention_mask"].shape == (2, 4, 12)
    assert out["pixel_values"].shape == (2, 3, 32, 32) and out["superpixels"].shape == (2, 32, 32)
    eos = processor.tokenizer.eos_token_id
    # every chunk is its own text: it starts with <bos> and keeps <eos> when truncated to max_length
    assert (out["input_ids"][..., 0] == processor.tokenizer.bos_token_id).all()
    assert ((out["input_ids"] == eos).sum(-1) == 1).all()
    first = processor.tokenizer(balanced_chunks(long_caption, 4)[0], truncation=True, max_length=12)["input_ids"]
    assert out["input_ids"][0, 0, : len(first)].tolist() == first


def test_processor_takes_given_sub_captions_and_random_chunking(processor):
    out = processor(text=[SENTENCES[:8], SENTENCES[4:12]], padding="max_length")
    assert out["input_ids"].shape == (2, 8, 12)
    longest = processor(text=[SENTENCES[:8], SENTENCES[4:12]])  # the default: the longest sub-caption
    assert longest["input_ids"].shape == (2, 8, int(out["attention_mask"].sum(-1).max()))
    a = processor(text=" ".join(SENTENCES[:9]), chunking="random", rng=random.Random(5))["input_ids"]
    b = processor(text=" ".join(SENTENCES[:9]), chunking="random", rng=random.Random(5))["input_ids"]
    assert torch.equal(a, b) and a.shape == (1, 4, 12)
    with pytest.raises(ValueError, match="same non-zero number of sub-captions"):
        processor(text=[SENTENCES[:8], SENTENCES[:4]])
    with pytest.raises(ValueError, match="no sentence"):
        processor(text="  ")
    with pytest.raises(ValueError, match="chunking must be"):
        processor(text="A. B.", chunking="greedy")


def test_image_processor_without_superpixels_is_refused(processor):
    from transformers import CLIPImageProcessor

    with pytest.raises(ValueError, match="needs superpixels .* CASTImageProcessor"):
        FCASTProcessor(CLIPImageProcessor(), processor.tokenizer)


def test_collator_draws_k_sub_captions_from_the_batch_content(processor):
    from hf_longclip.recipes.fcast.task import FCASTCollator

    image = Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8))
    rows = [{"image": image, "caption": " ".join(SENTENCES[:9]), "captions": ["x", "Other one. Other two.", "Third."]},
            {"image": image, "caption": " ".join(SENTENCES[3:8]), "captions": ["x", "Another.", "More here."]}]
    processor = FCASTProcessor(processor.image_processor, processor.tokenizer, max_length=77)  # no truncation
    collate = FCASTCollator(processor, num_sub_captions=6)
    batch = collate(rows)
    assert batch["input_ids"].shape[:2] == (2, 6) and batch["superpixels"].shape == (2, 32, 32)
    torch.manual_seed(123)  # the draw depends on the batch and the seed only (exact resume), not on torch's RNG
    assert torch.equal(collate(rows)["input_ids"], batch["input_ids"])
    assert not torch.equal(FCASTCollator(processor, 6, seed=1)(rows)["input_ids"], batch["input_ids"])
    decoded = [processor.tokenizer.decode(ids, skip_special_tokens=True) for ids in batch["input_ids"][0, :4]]
    assert " ".join(decoded).replace(" .", ".") == " ".join(SENTENCES[:9]).lower()  # the first N: the long caption
    with pytest.raises(ValueError, match="K = 3 .* smaller than N = 4"):
        FCASTCollator(processor, num_sub_captions=3)
