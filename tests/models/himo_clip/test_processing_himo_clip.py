"""HiMoCLIPProcessor: 248-token texts with the end-of-text token kept, images to pixel_values."""

import pytest

from helpers.builders import CAPTIONS, IMAGE_SIZE, random_images, tiny_processor
from hf_longclip import HiMoCLIPProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer

LONG = " ".join(CAPTIONS * 20)  # hundreds of tokens with either tokenizer


def _processors() -> dict[str, HiMoCLIPProcessor]:
    clip_like = tiny_processor()
    scene = HiMoCLIPProcessor(image_processor=clip_like.image_processor, tokenizer=train_scene_tokenizer(CAPTIONS))
    return {"clip_tokenizer": clip_like, "scene_tokenizer": scene}


@pytest.mark.parametrize("name", list(_processors()))
def test_texts_are_padded_to_248_and_truncation_keeps_end_of_text_last(name):
    processor = _processors()[name]
    tokenizer = processor.tokenizer
    encoded = processor(text=["a red circle.", LONG])
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    assert ids.shape == mask.shape == (2, 248)
    assert ids[1, 0] == tokenizer.bos_token_id and ids[1, -1] == tokenizer.eos_token_id  # truncated, EOT last
    assert mask[1].all()
    short_length = int(mask[0].sum())
    assert ids[0, short_length - 1] == tokenizer.eos_token_id and not mask[0, short_length:].any()
    assert ids[1, :-1].tolist() == processor.tokenizer(LONG)["input_ids"][:247]  # the first 247 tokens kept


def test_padding_longest_by_default_max_length_on_request_and_other_max_lengths():
    processor = tiny_processor(max_length=77)
    encoded = processor(text=["a cat.", "a red dog."])
    assert encoded["input_ids"].shape == (2, len(processor.tokenizer("a red dog.")["input_ids"]))
    assert processor(text=["a cat.", "a red dog."], padding="max_length")["input_ids"].shape == (2, 77)
    assert processor(text=[LONG])["input_ids"].shape == (1, 77)


def test_images_become_pixel_values():
    encoded = tiny_processor()(images=random_images(3))
    assert encoded["pixel_values"].shape == (3, 3, IMAGE_SIZE, IMAGE_SIZE)
    both = tiny_processor()(text=CAPTIONS[:3], images=random_images(3))
    assert set(both) == {"input_ids", "attention_mask", "pixel_values"}


def test_bad_calls_raise():
    processor = tiny_processor()
    with pytest.raises(ValueError, match="text"):
        processor()
    with pytest.raises(ValueError, match="exceed"):
        processor(text=[LONG], truncation=False, padding="longest")
    with pytest.raises(ValueError, match="max_length"):
        HiMoCLIPProcessor(image_processor=processor.image_processor, tokenizer=processor.tokenizer, max_length=1)


def test_save_and_reload_keeps_max_length(tmp_path):
    processor = tiny_processor(max_length=100)
    processor.save_pretrained(tmp_path)
    reloaded = HiMoCLIPProcessor.from_pretrained(tmp_path)
    assert reloaded.max_length == 100
    assert (reloaded(text=[LONG])["input_ids"] == processor(text=[LONG])["input_ids"]).all()
