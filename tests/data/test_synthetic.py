"""The synthetic scenes benchmark and its locally trained word-level tokenizer."""

import random
import statistics
from collections import defaultdict

import numpy as np
import pytest
from datasets import Image as ImageFeature
from transformers import AutoTokenizer

from hf_longclip.data.synthetic import (
    COLORS,
    DISTRACTORS,
    FEATURES,
    SHAPES,
    SIZES,
    load_synthetic_scenes,
    render_scene,
    sample_scene,
)
from hf_longclip.data.tokenizer import SPECIAL_TOKENS, train_scene_tokenizer
from hf_longclip.miniature import scene_corpus

SMALL = dict(num_train=64, num_validation=16, num_test=32)
CLIP_POSITIONS = 77


def image_bytes(split) -> list[bytes]:
    return [image["bytes"] for image in split.cast_column("image", ImageFeature(decode=False))["image"]]


def words(text: str) -> set[str]:
    return set(text.replace(",", " ").replace(".", " ").split())


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return load_synthetic_scenes(seed=0, cache_dir=str(tmp_path_factory.mktemp("scenes")), **SMALL)


@pytest.fixture(scope="module")
def long_scenes(tmp_path_factory):
    """400 test captions for the length statistics."""
    return load_synthetic_scenes(seed=0, cache_dir=str(tmp_path_factory.mktemp("long")),
                                 num_train=64, num_validation=2, num_test=400)


@pytest.fixture(scope="module")
def tokenizer(long_scenes):
    return train_scene_tokenizer(scene_corpus(long_scenes))


def test_same_seed_is_identical_and_other_seed_differs(scenes, tmp_path):
    again = load_synthetic_scenes(seed=0, cache_dir=str(tmp_path / "again"), **SMALL)
    other = load_synthetic_scenes(seed=1, cache_dir=str(tmp_path / "other"), **SMALL)
    for split in scenes:
        assert again[split]["caption"][:] == scenes[split]["caption"][:]
        assert again[split]["boxes"][:] == scenes[split]["boxes"][:]
        assert image_bytes(again[split]) == image_bytes(scenes[split])
        assert not set(other[split]["caption"]) & set(scenes[split]["caption"])
        assert image_bytes(other[split]) != image_bytes(scenes[split])


def test_sizes_and_disjoint_splits(scenes):
    assert {split: len(scenes[split]) for split in scenes} == {
        "train": SMALL["num_train"], "validation": SMALL["num_validation"], "test": SMALL["num_test"]}
    captions = {split: set(scenes[split]["caption"]) for split in scenes}
    assert not captions["train"] & captions["validation"]
    assert not captions["train"] & captions["test"]
    assert not captions["validation"] & captions["test"]
    image = scenes["test"][0]["image"]
    assert (image.mode, image.size) == ("RGB", (64, 64))


def test_schema_and_types(scenes):
    assert scenes["train"].features == FEATURES
    row = scenes["train"][0]
    assert isinstance(row["caption"], str) and isinstance(row["distractor"], str)
    assert isinstance(row["group_id"], int)
    assert all(isinstance(text, str) for key in ("sentences", "subtexts", "levels") for text in row[key])
    assert all(len(box) == 4 and all(isinstance(v, float) for v in box) for box in row["boxes"])


def test_sentences_subtexts_and_boxes(scenes):
    for row in scenes["train"]:
        sentences, boxes = row["sentences"], np.array(row["boxes"])
        assert [" ".join(sentences[: k + 1]) for k in range(len(sentences))] == row["subtexts"]
        assert row["subtexts"][-1] == row["caption"]
        assert 3 <= len(boxes) == len(sentences) - 1 <= 7
        assert (boxes >= 0).all() and (boxes <= 1).all()
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
        areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        assert (np.diff(areas) <= 1e-6).all()  # salience order: larger first


def test_levels_grow_from_generic_to_specific(scenes):
    for row in scenes["train"]:
        levels = row["levels"]
        assert len(levels) == 4 and levels[0] == "a picture of shapes."
        for generic, specific in zip(levels, levels[1:]):
            assert words(generic) < words(specific)


def test_distractors_are_off_topic(scenes):
    scene_words = {*COLORS, *SHAPES, *SIZES, "shape", "shapes", "picture", "image"}
    for row in scenes["train"]:
        assert row["distractor"] in DISTRACTORS
        assert not words(row["distractor"].lower()) & scene_words


def test_hard_negative_pairs_differ_only_in_the_last_sentence(scenes):
    split = scenes["train"]
    groups = defaultdict(list)
    for index, group_id in enumerate(split["group_id"]):
        groups[group_id].append(index)
    assert all(len(members) == 2 for members in groups.values())
    images = image_bytes(split)
    for first, second in groups.values():
        a, b = split[first], split[second]
        assert a["sentences"][:-1] == b["sentences"][:-1]
        assert a["sentences"][-1] != b["sentences"][-1]
        assert (a["boxes"], a["distractor"]) == (b["boxes"], b["distractor"])
        assert images[first] != images[second]


def test_every_object_stays_visible():
    """Each object's centre pixel keeps its colour: later (smaller) objects never cover it."""
    for index in range(50):
        scene = sample_scene(random.Random(index), 3, 7)
        pixels = np.asarray(render_scene(scene, 64))
        for obj in scene.objects:
            x, y = (int(coordinate * 64) for coordinate in obj.center)
            assert tuple(pixels[y, x]) == COLORS[obj.color]


def test_caption_token_lengths(long_scenes, tokenizer):
    test = long_scenes["test"]
    lengths = [len(ids) for ids in tokenizer(test["caption"][:])["input_ids"]]
    assert len(lengths) == 400
    assert 90 <= statistics.median(lengths) <= 140
    assert sum(length > CLIP_POSITIONS for length in lengths) / len(lengths) >= 0.5
    assert max(lengths) <= 240
    texts = [*test["caption"], *test["distractor"], *(level for levels in test["levels"] for level in levels)]
    assert all(tokenizer.unk_token_id not in ids for ids in tokenizer(texts)["input_ids"])


def test_most_hard_negatives_differ_only_after_77_tokens(long_scenes, tokenizer):
    test = long_scenes["test"]
    sentences, captions = test["sentences"][:], test["caption"][:]
    late = 0
    for first in range(0, len(test), 2):
        # index of the differing sentence's first token, counting the start token
        start = 1 + len(tokenizer(" ".join(sentences[first][:-1]), add_special_tokens=False)["input_ids"])
        if start >= CLIP_POSITIONS:
            late += 1
            pair = tokenizer(captions[first : first + 2], truncation=True, max_length=CLIP_POSITIONS)["input_ids"]
            assert pair[0] == pair[1]
    assert late / (len(test) // 2) >= 0.6


def test_tokenizer_words_punctuation_and_special_tokens(tokenizer):
    assert [tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS.values()] == [0, 1, 2, 3]
    ids = tokenizer("A Red circle, Zebra.")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == [
        "<|startoftext|>", "a", "red", "circle", ",", "<|unk|>", ".", "<|endoftext|>"]


def test_truncation_keeps_eos_last(long_scenes, tokenizer):
    texts = [*long_scenes["test"]["caption"][:20], "a red circle."]
    for max_length in (8, CLIP_POSITIONS, 248):
        for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]:
            assert len(ids) <= max_length
            assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id


def test_tokenizer_round_trip(long_scenes, tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = long_scenes["test"]["caption"][:50]
    assert loaded(texts, truncation=True, max_length=CLIP_POSITIONS)["input_ids"] == tokenizer(
        texts, truncation=True, max_length=CLIP_POSITIONS)["input_ids"]
    assert loaded(texts, padding="longest")["input_ids"] == tokenizer(texts, padding="longest")["input_ids"]
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert loaded.model_max_length == tokenizer.model_max_length == 248
    assert [loaded.bos_token_id, loaded.eos_token_id, loaded.pad_token_id, loaded.unk_token_id] == [0, 1, 2, 3]
