"""DITM sentence descriptiveness (Eq. 1-2): checked against a direct loop over words on hand-made corpora, the bad
inputs (empty / all-stop-word sentences, words absent from the pool, one-sentence pools) and the cached `datasets`
column."""

import math
import random
import re
from collections import Counter

import datasets
import numpy as np
import pytest

from hf_longclip.recipes.ditm import descriptiveness as module
from hf_longclip.recipes.ditm.descriptiveness import (
    ENGLISH_STOP_WORDS,
    DescriptivenessScorer,
    add_descriptiveness_column,
    tokenize_words,
)

# Hand-made pool: the sentences and, written out by hand, the words Eq. 1 counts (stop-words removed).
CORPUS = [
    "A dog.",
    "A dog on the grass.",
    "A black dog and a white dog on the grass.",
    "Two cats sleeping on a red sofa.",
    "The... of, and!",  # all stop-words
    "",
]
CORPUS_WORDS = [
    ["dog"],
    ["dog", "grass"],
    ["black", "dog", "white", "dog", "grass"],
    ["two", "cats", "sleeping", "red", "sofa"],
    [],
    [],
]
# By hand: M = 6; M_dog = 3, M_grass = 2, every other word 1, so idf(dog) = log 2, idf(grass) = log 3, others log 6.
#   delta("A black dog and a white dog on the grass.") = 1/5 log 6 + 2/5 log 2 + 1/5 log 6 + 1/5 log 3
#                                                      = (2 log 6 + 2 log 2 + log 3) / 5 = 1.2136851...
#   delta("A dog on the grass.") = (log 2 + log 3) / 2 = log(6) / 2: half the pool maximum log 6 ("Two cats ..."),
#   and the minimum is 0 (the last two sentences), so its normalised score is exactly 0.5.
HAND_RAW = [math.log(2), math.log(6) / 2, 1.2136851, math.log(6), 0.0, 0.0]
HAND_NORMALISED = [math.log(2) / math.log(6), 0.5, 1.2136851 / math.log(6), 1.0, 0.0, 0.0]


def direct_descriptiveness(pool: list[list[str]], words: list[str]) -> float:
    """Eq. 1-2 as written: sum over the distinct words w of t of (N_w / N) * log(M / M_w); M_w = 1 for a word that
    is not in the pool, 0 for a sentence without words."""
    if not words:
        return 0.0
    total = 0.0
    for word in set(words):
        in_pool = sum(word in sentence for sentence in pool)
        total += words.count(word) / len(words) * math.log(len(pool) / max(in_pool, 1))
    return total


def plain_words(text: str, stop_words=ENGLISH_STOP_WORDS) -> list[str]:
    """An independent tokeniser for ASCII text: lower-cased runs of [a-z0-9], stop-words removed."""
    return [word for word in re.findall(r"[a-z0-9]+", text.lower()) if word not in stop_words]


def frequencies(scorer: DescriptivenessScorer) -> dict[str, int]:
    """The fitted M_w of each pool word."""
    return dict(zip(scorer.vocabulary.to_pylist(), scorer.document_frequency.tolist(), strict=True))


def on_disk(tmp_path, rows: dict, name: str = "data", features=None) -> datasets.Dataset:
    """A dataset backed by an Arrow file, so that `map` writes (and reuses) cache files next to it."""
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / name))
    return datasets.load_from_disk(str(tmp_path / name))


@pytest.fixture(autouse=True)
def quiet():
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


# ---------------------------------------------------------------------------------------------------------------
# Words
# ---------------------------------------------------------------------------------------------------------------
def test_tokenize_words_rule():
    # lower-cased, split at anything but letters and digits (hyphen, apostrophe, punctuation), stop-words out
    assert tokenize_words("A Black-and-white DOG's toy, 2 balls!") == ["black", "white", "dog", "toy", "2", "balls"]
    assert tokenize_words("Café crème\tbrûlée\n") == ["café", "crème", "brûlée"]  # Unicode letters are letters
    assert tokenize_words("A Black-and-white DOG's toy", stop_words=()) == ["a", "black", "and", "white", "dog", "s",
                                                                          "toy"]
    assert tokenize_words("") == [] and tokenize_words(" ... !? ") == [] and tokenize_words("The of, AND") == []
    for text, words in zip(CORPUS, CORPUS_WORDS, strict=True):
        assert tokenize_words(text) == words


def test_stop_word_list_is_function_words_only():
    assert {"a", "the", "of", "on", "and", "is", "with", "s", "t", "don"} <= ENGLISH_STOP_WORDS
    # content words that make a caption specific are kept (scikit-learn's list would drop these)
    assert not {"two", "three", "top", "front", "back", "side", "bottom", "red", "dog", "fire"} & ENGLISH_STOP_WORDS
    assert all("'" not in word and word == word.lower() for word in ENGLISH_STOP_WORDS)


# ---------------------------------------------------------------------------------------------------------------
# Eq. 1-2 against the direct implementation
# ---------------------------------------------------------------------------------------------------------------
def test_hand_made_corpus_matches_eq_1_2():
    scorer = DescriptivenessScorer().fit(CORPUS)
    expected = [direct_descriptiveness(CORPUS_WORDS, words) for words in CORPUS_WORDS]
    np.testing.assert_allclose(expected, HAND_RAW, rtol=1e-7)  # the loop agrees with the numbers worked by hand
    np.testing.assert_allclose(scorer.raw_scores(CORPUS), expected, rtol=1e-12, atol=1e-15)
    assert scorer.num_documents == 6 and (scorer.raw_min, scorer.raw_max) == (0.0, pytest.approx(math.log(6)))
    assert frequencies(scorer) == {
        "dog": 3, "grass": 2, "black": 1, "white": 1, "two": 1, "cats": 1, "sleeping": 1, "red": 1, "sofa": 1}
    # min-max over the pool: exactly [0, 1] on the pool itself
    np.testing.assert_allclose(scorer.scores(CORPUS), HAND_NORMALISED, rtol=1e-7, atol=1e-15)
    assert scorer.scores(CORPUS).min() == 0.0 and scorer.scores(CORPUS).max() == 1.0


def test_without_stop_words_every_word_counts():
    """stop_words=() is Eq. 1 over every word: "a", "the", "on" count in N and in the pool."""
    scorer = DescriptivenessScorer(stop_words=()).fit(CORPUS)
    pool = [plain_words(text, ()) for text in CORPUS]
    expected = [direct_descriptiveness(pool, words) for words in pool]
    np.testing.assert_allclose(scorer.raw_scores(CORPUS), expected, rtol=1e-12, atol=1e-15)
    # "A dog.": a in 4 of 6, dog in 3 of 6 -> (log 1.5 + log 2) / 2, not the log 2 of the stop-word default
    assert scorer.raw_scores(["A dog."])[0] == pytest.approx((math.log(1.5) + math.log(2)) / 2)


def test_random_pool_in_many_batches_matches_direct():
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(40)] + ["the", "a", "on", "of"]
    texts = [" ".join(rng.choices(vocabulary, weights=[1 / (i + 1) for i in range(len(vocabulary))],
                                  k=rng.randint(0, 12))).capitalize() + rng.choice([".", "", " !"])
             for _ in range(300)]
    # batches of 3 sentences: 100 partial counts, more than the 64 kept before they are summed
    scorer = DescriptivenessScorer().fit(texts, batch_size=3)
    pool = [plain_words(text) for text in texts]
    document_frequency = Counter(word for words in pool for word in set(words))
    assert frequencies(scorer) == document_frequency
    expected = np.array([direct_descriptiveness(pool, words) for words in pool])
    np.testing.assert_allclose(scorer.raw_scores(texts, batch_size=7), expected, rtol=1e-12, atol=1e-15)
    normalised = (expected - expected.min()) / (expected.max() - expected.min())
    np.testing.assert_allclose(scorer.scores(texts), normalised, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------
def test_empty_and_stop_word_sentences_score_zero():
    scorer = DescriptivenessScorer().fit(CORPUS)
    nothing = ["", "   ", "...!", "The of, and", "it is what it is", None]
    np.testing.assert_array_equal(scorer.raw_scores(nothing), np.zeros(len(nothing)))
    np.testing.assert_array_equal(scorer.scores(nothing), np.zeros(len(nothing)))  # the pool's min is 0 here
    # a pool without such sentences has min > 0: raw 0 is below it, clipped to 0 (the affine value is negative)
    pool = ["a dog", "a dog on the grass", "two cats on a red sofa"]
    scorer = DescriptivenessScorer().fit(pool)
    assert scorer.raw_min > 0
    assert scorer.scores([""])[0] == 0.0
    assert scorer.scores([""], clip=False)[0] == pytest.approx(-scorer.raw_min / (scorer.raw_max - scorer.raw_min))
    assert scorer.scores([""], clip=False)[0] < 0


def test_words_absent_from_the_pool_get_idf_log_m():
    scorer = DescriptivenessScorer().fit(CORPUS)  # M = 6
    np.testing.assert_allclose(scorer.idf(["zebra", "dog", "Grass"]), [math.log(6), math.log(2), math.log(3)])
    # an unseen word stays in N: "dog zebra" is the mean of log 2 and log 6, not log 2
    raw = scorer.raw_scores(["a zebra", "a dog and a zebra", "Zebra zebra dog"])
    np.testing.assert_allclose(raw, [math.log(6), (math.log(2) + math.log(6)) / 2,
                                     (2 * math.log(6) + math.log(2)) / 3])
    # a pool whose maximum is below log M: a sentence of unseen words lies above it, clipped to 1 by default
    scorer = DescriptivenessScorer().fit(["dog", "dog cat", "cat bird", "bird dog"])  # idf: log 4/3, log 2, log 2
    assert scorer.raw_max == pytest.approx(math.log(2))
    assert scorer.scores(["zebra"])[0] == 1.0
    unclipped = (math.log(4) - math.log(4 / 3)) / (math.log(2) - math.log(4 / 3))
    assert scorer.scores(["zebra"], clip=False)[0] == pytest.approx(unclipped) and unclipped > 1


def test_pools_without_a_min_max_range_raise():
    one = DescriptivenessScorer().fit(["a black dog on the grass"])
    assert one.raw_scores(["a black dog on the grass", "a cat"]).tolist() == [0.0, 0.0]  # every idf is log(1/1)
    with pytest.raises(ValueError, match="one-sentence pool"):
        one.scores(["a black dog"])
    for pool in (["red dog", "dog red"], ["red", "blue"], ["", "the"]):  # equal raw scores: no range either
        with pytest.raises(ValueError, match="undefined for this pool"):
            DescriptivenessScorer().fit(pool).normalize(np.zeros(1))
    with pytest.raises(ValueError, match="pool is empty"):
        DescriptivenessScorer().fit([])
    with pytest.raises(RuntimeError, match="not fitted"):
        DescriptivenessScorer().raw_scores(["a dog"])
    with pytest.raises(TypeError, match="single str"):
        DescriptivenessScorer().fit("a dog")


# ---------------------------------------------------------------------------------------------------------------
# The `datasets` column
# ---------------------------------------------------------------------------------------------------------------
def test_column_of_a_string_column(tmp_path):
    dataset = on_disk(tmp_path, {"caption": CORPUS, "id": list(range(len(CORPUS)))})
    result = add_descriptiveness_column(dataset, "caption", batch_size=4)
    assert result.column_names == ["caption", "id", "descriptiveness"]
    assert result.features["descriptiveness"] == datasets.Value("float64")
    np.testing.assert_allclose(result["descriptiveness"], HAND_NORMALISED, rtol=1e-7, atol=1e-15)
    raw = add_descriptiveness_column(dataset, "caption", normalize=False, output_column="raw")
    np.testing.assert_allclose(raw["raw"], HAND_RAW, rtol=1e-7, atol=1e-15)


def test_column_of_a_list_column(tmp_path):
    rows = {"captions": [CORPUS[:2], [], None, CORPUS[2:]]}
    dataset = on_disk(tmp_path, rows, features=datasets.Features({"captions": datasets.List(datasets.Value("string"))}))
    result = add_descriptiveness_column(dataset, "captions", batch_size=3)  # a batch boundary inside the rows
    assert result.features["descriptiveness"] == datasets.List(datasets.Value("float64"))
    scores = result["descriptiveness"]
    assert scores[1] == [] and scores[2] is None
    # the pool is every list item (M = 6), so the scores are those of the flat corpus, aligned with the sentences
    np.testing.assert_allclose(scores[0] + scores[3], HAND_NORMALISED, rtol=1e-7, atol=1e-15)


def test_fixed_length_caption_lists_and_a_subset(tmp_path):
    features = datasets.Features({"captions": datasets.List(datasets.Value("string"), length=2)})
    rows = {"captions": [CORPUS[0:2], CORPUS[2:4], CORPUS[4:6], ["a dog", "a red dog"]]}
    dataset = on_disk(tmp_path, rows, features=features)
    subset = dataset.select([3, 1])  # an indices mapping: the pool is these two rows only
    result = add_descriptiveness_column(subset, "captions")
    sentences = [*rows["captions"][3], *rows["captions"][1]]
    expected = DescriptivenessScorer().fit(sentences).scores(sentences)
    np.testing.assert_allclose(np.ravel(result["descriptiveness"]), expected)
    assert not np.allclose(expected, DescriptivenessScorer().fit(CORPUS + ["a dog", "a red dog"]).scores(sentences))


def test_cache_is_reused_for_the_same_pool_and_not_for_another(tmp_path, monkeypatch):
    dataset = on_disk(tmp_path, {"caption": CORPUS})
    first = add_descriptiveness_column(dataset)
    calls = []
    original = module._ScoreBatch.__call__
    monkeypatch.setattr(module._ScoreBatch, "__call__", lambda self, batch: calls.append(1) or original(self, batch))
    again = add_descriptiveness_column(dataset)  # same data, same pool (refitted): the cache file is loaded
    assert calls == [] and again.cache_files == first.cache_files
    assert again["descriptiveness"] == first["descriptiveness"] and again._fingerprint == first._fingerprint
    same_pool = DescriptivenessScorer().fit(CORPUS)  # another scorer, equal statistics: also cached
    assert add_descriptiveness_column(dataset, scorer=same_pool).cache_files == first.cache_files and calls == []
    # another pool (e.g. the training split's, scoring this one): computed anew, into another cache file
    other_pool = DescriptivenessScorer().fit(["a dog", "a black dog", "a cat on a red sofa", "grass"])
    other = add_descriptiveness_column(dataset, scorer=other_pool)
    assert calls and other.cache_files != first.cache_files
    assert other["descriptiveness"] != first["descriptiveness"]
    np.testing.assert_allclose(other["descriptiveness"], other_pool.scores(CORPUS))
    # and any other option too
    calls.clear()
    unclipped = add_descriptiveness_column(dataset, scorer=other_pool, clip=False)
    assert calls and unclipped.cache_files not in (first.cache_files, other.cache_files)
    np.testing.assert_allclose(unclipped["descriptiveness"], other_pool.scores(CORPUS, clip=False))
    calls.clear()
    assert add_descriptiveness_column(dataset, load_from_cache_file=False)["descriptiveness"] == \
        first["descriptiveness"] and calls


def test_test_split_uses_its_own_pool_and_a_given_scorer_the_train_pool(tmp_path):
    train = on_disk(tmp_path, {"caption": CORPUS}, "train")
    test = on_disk(tmp_path, {"caption": ["a dog on a sofa", "a white cat", "a cat", "two white dogs"]}, "test")
    analysis = add_descriptiveness_column(test)  # Sec. IV-E: the test sentences are the pool
    np.testing.assert_allclose(analysis["descriptiveness"], DescriptivenessScorer().fit(test["caption"]).scores(
        test["caption"]))
    assert min(analysis["descriptiveness"]) == 0.0 and max(analysis["descriptiveness"]) == 1.0
    train_scorer = DescriptivenessScorer().fit_dataset(train, "caption")
    with_train_pool = add_descriptiveness_column(test, scorer=train_scorer)
    np.testing.assert_allclose(with_train_pool["descriptiveness"], train_scorer.scores(test["caption"]))
    assert with_train_pool["descriptiveness"] != analysis["descriptiveness"]


def test_one_row_dataset_raises_unless_raw(tmp_path):
    dataset = on_disk(tmp_path, {"caption": ["a black dog"]})
    with pytest.raises(ValueError, match="one-sentence pool"):
        add_descriptiveness_column(dataset)
    assert add_descriptiveness_column(dataset, normalize=False)["descriptiveness"] == [0.0]


def test_format_kept_and_output_column_replaced(tmp_path):
    dataset = on_disk(tmp_path, {"caption": CORPUS, "id": list(range(6))}).with_format("numpy")
    result = add_descriptiveness_column(dataset)
    assert result.format["type"] == "numpy" and isinstance(result["descriptiveness"][:], np.ndarray)
    again = add_descriptiveness_column(result, scorer=DescriptivenessScorer().fit(CORPUS[:4]))
    assert again.column_names == ["caption", "id", "descriptiveness"]
    np.testing.assert_allclose(again["descriptiveness"][:], DescriptivenessScorer().fit(CORPUS[:4]).scores(CORPUS))
    with pytest.raises(ValueError, match="must differ"):
        add_descriptiveness_column(dataset, output_column="caption")
    with pytest.raises(TypeError, match="must hold sentences"):
        add_descriptiveness_column(dataset, "id")


def test_num_proc_gives_the_same_column(tmp_path):
    texts = [f"a {color} {shape} on the {place}" for color in ("red", "blue", "green") for shape in ("dog", "cat")
             for place in ("grass", "sofa", "floor")] + ["a dog", "a red cat sleeping on the grass", ""]
    dataset = on_disk(tmp_path, {"caption": texts})
    single = add_descriptiveness_column(dataset, batch_size=4)
    double = add_descriptiveness_column(dataset, batch_size=4, num_proc=2, load_from_cache_file=False)
    assert double["descriptiveness"] == single["descriptiveness"]


def test_synthetic_levels_grow_generic_to_specific(tmp_path):
    """HierarCaps-style levels of the synthetic scenes (Fig. 8-(b)): each level adds words, so descriptiveness
    grows from level 1 to level 4 in every row; level 1 ("a picture of shapes.") has words shared by every level
    sentence, hence idf 0 and score 0."""
    from hf_longclip.data.synthetic import load_synthetic_scenes

    train = load_synthetic_scenes(seed=0, cache_dir=str(tmp_path), num_train=32, num_validation=2, num_test=2)["train"]
    levels = np.array(add_descriptiveness_column(train, "levels")["descriptiveness"])
    assert levels.shape == (32, 4)
    assert (levels[:, 0] == 0).all() and (np.diff(levels, axis=1) > 0).all()
