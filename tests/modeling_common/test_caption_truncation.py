"""Captions past the model's length: every processor (HiMo-CLIP, OneLIP, DITM, F-CAST) keeps the end-of-text token
last in a truncated caption, with a real CLIP BPE tokenizer and with the scenes' word-level one, and counts what it
cut (`truncation_stats`: texts, cut ones, tokens lost); so does the evaluation's path for a plain CLIPProcessor."""

import pytest
import torch
from transformers import CLIPImageProcessorPil, CLIPProcessor

from helpers.builders import CAPTIONS, IMAGE_SIZE, char_clip_tokenizer, tiny_clip, tiny_processor
from helpers.fcast import CAPTIONS as SCENE_CAPTIONS
from helpers.fcast import tiny_processor as fcast_processor
from hf_longclip import DITMProcessor, HiMoCLIPProcessor, OneLIPProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.evaluation.encoding import encode_texts, reset_truncation_stats, truncation_stats

MAX_LENGTH = 24
LONG = " ".join(CAPTIONS)  # ~240 characters: hundreds of tokens with the character tokenizer, ~45 words
PROCESSORS = {"himo-clip": HiMoCLIPProcessor, "onelip": OneLIPProcessor, "ditm": DITMProcessor}


def make(kind: str, tokenizer: str):
    image_processor = tiny_processor().image_processor
    tokens = char_clip_tokenizer() if tokenizer == "clip-bpe" else train_scene_tokenizer(CAPTIONS)
    return PROCESSORS[kind](image_processor=image_processor, tokenizer=tokens, max_length=MAX_LENGTH)


@pytest.mark.parametrize("tokenizer", ["clip-bpe", "word-level"])
@pytest.mark.parametrize("kind", list(PROCESSORS))
def test_truncation_keeps_the_end_of_text_token_last_and_is_counted(kind, tokenizer):
    processor = make(kind, tokenizer)
    vocabulary = processor.tokenizer
    full = vocabulary(LONG)["input_ids"]
    assert len(full) > MAX_LENGTH
    encoded = processor(text=["a red circle.", LONG])
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    assert ids.shape == (2, MAX_LENGTH) and mask[1].all()
    assert ids[1, 0] == vocabulary.bos_token_id and ids[1, -1] == vocabulary.eos_token_id  # EOS kept, last
    assert ids[1, :-1].tolist() == full[: MAX_LENGTH - 1]  # the caption's first tokens, then EOS
    short = int(mask[0].sum())
    assert ids[0, short - 1] == vocabulary.eos_token_id
    assert processor.truncation_stats == {"texts": 2, "truncated": 1, "tokens_cut": len(full) - MAX_LENGTH,
                                          "max_tokens_cut": len(full) - MAX_LENGTH, "max_length": MAX_LENGTH}
    processor(text=LONG, return_tensors=None)  # one text, lists: counted too
    assert processor.truncation_stats["texts"] == 3 and processor.truncation_stats["truncated"] == 2
    assert "truncation_stats" not in processor.to_dict()  # a count, not a setting: never saved


def test_fcast_chunks_cut_to_their_length_keep_the_end_of_text_token_and_are_counted():
    processor = fcast_processor(num_chunks=2)  # chunks of at most 16 tokens, 14 of text
    tokenizer = processor.tokenizer
    long_chunk = " ".join(SCENE_CAPTIONS[:2])  # ~45 tokens: far past one chunk
    encoded = processor(text=[[SCENE_CAPTIONS[0].split(". ")[0] + ".", long_chunk]])
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    assert ids.shape == (1, 2, processor.max_length) and mask[0, 1].all()
    assert ids[0, 1, 0] == tokenizer.bos_token_id and ids[0, 1, -1] == tokenizer.eos_token_id
    assert ids[0, 1, :-1].tolist() == tokenizer(long_chunk)["input_ids"][: processor.max_length - 1]
    stats = processor.truncation_stats
    assert stats["texts"] == 2 and stats["truncated"] == 1
    assert stats["tokens_cut"] == len(tokenizer(long_chunk)["input_ids"]) - processor.max_length
    # balanced chunking of a caption longer than its chunks: each overflowing chunk keeps its EOS, and is counted
    with pytest.warns(UserWarning, match="truncated"):
        chunked = processor(text=[" ".join(SCENE_CAPTIONS)])["input_ids"]
    assert chunked.shape[:2] == (1, 2)
    for chunk in chunked[0]:
        content = chunk[chunk != tokenizer.pad_token_id]
        assert content[0] == tokenizer.bos_token_id and content[-1] == tokenizer.eos_token_id
    assert processor.truncation_stats["truncated"] >= 2


def test_evaluation_counts_what_a_plain_clip_processor_cuts():
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE},
                                            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=char_clip_tokenizer())
    model = tiny_clip()
    reset_truncation_stats(processor)
    with torch.no_grad():
        encode_texts(model, processor, [CAPTIONS[0], LONG, LONG], batch_size=2)
    full = len(processor.tokenizer(LONG)["input_ids"])
    assert truncation_stats(processor) == {"texts": 3, "truncated": 2, "tokens_cut": 2 * (full - 77),
                                           "max_tokens_cut": full - 77, "max_length": 77}
