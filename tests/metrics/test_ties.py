"""The tie rules on constructed ties: the fair rule equals the average over every way of breaking the ties (checked by
enumerating them), optimistic and pessimistic its two extremes, for every metric that ranks."""

import itertools
import math

import numpy as np
import pytest
import torch

from hf_longclip.metrics import long_text_retrieval, recall_at_k
from hf_longclip.metrics.install import load
from hf_longclip.metrics.retrieval import (
    DegenerateEmbeddingsWarning,
    cxc_retrieval,
    fold_retrieval,
    multi_positive_recall,
    pair_recall_at_1,
    recall_at_1_by_text,
)
from hf_longclip.metrics.ties import TIE_RULES, hit_credit
from hf_longclip.metrics.zero_shot import zero_shot_classification


def enumerated_recall(scores: np.ndarray, positives: list[set[int]], k: int) -> float:
    """Percent of hits at k averaged over every order of each query's candidates that sorts by score: the ties
    broken in every possible way (a priority permutation per query), a hit if a positive is among the first k."""
    credits = []
    for row, positive in zip(scores, positives):
        orders = list(itertools.permutations(range(len(row))))
        hits = [any(i in positive for i in sorted(range(len(row)), key=lambda i: (-row[i], order[i]))[:k])
                for order in orders]
        credits.append(np.mean(hits))
    return 100 * float(np.mean(credits))


def test_two_identical_captions_of_two_images():
    # a 77-token encoder reading two captions that differ only after token 77: both texts get one embedding
    images, texts = np.eye(2), np.array([[1.0, 1.0], [1.0, 1.0]]) / math.sqrt(2)
    expected = {"fair": 50.0, "optimistic": 100.0, "pessimistic": 0.0}
    for rule, r1 in expected.items():
        with pytest.warns(DegenerateEmbeddingsWarning):
            result = long_text_retrieval(images, texts, [0, 1], ks=(1, 2), tie_rule=rule)
        assert (result["r1_i2t"], result["r2_i2t"], result["tie_rule"]) == (r1, 100.0, rule)
        assert result["ties_i2t"] == 2
        assert recall_at_k(torch.tensor(images @ texts.T), 1, tie_rule=rule) == r1
    assert long_text_retrieval(images, texts, [0, 1], ks=(1,))["r1_i2t"] == 50.0  # fair is the default


@pytest.mark.filterwarnings("ignore::hf_longclip.metrics.retrieval.DegenerateEmbeddingsWarning")
@pytest.mark.parametrize("seed", range(4))
def test_fair_recall_is_the_mean_over_every_tie_break(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, (6, 6)).astype(float)  # small integers: ties everywhere
    images, texts = np.eye(6), scores.T.copy()
    for k in (1, 2, 3):
        expected = enumerated_recall(scores, [{i} for i in range(6)], k)
        assert recall_at_k(torch.tensor(scores), k) == pytest.approx(expected)
        assert long_text_retrieval(images, texts, range(6), ks=(k,))[f"r{k}_i2t"] == pytest.approx(expected)


@pytest.mark.filterwarnings("ignore::hf_longclip.metrics.retrieval.DegenerateEmbeddingsWarning")
@pytest.mark.parametrize("seed", range(4))
def test_fair_recall_with_several_captions_per_image(seed):
    # ties among an image's own captions cost nothing; ties with negatives share the places left
    rng = np.random.default_rng(seed)
    owner = np.array([0, 0, 0, 1, 1, 2])
    scores = rng.integers(0, 3, (3, 6)).astype(float)
    for k in (1, 2, 3):
        result = long_text_retrieval(np.eye(3), scores.T.copy(), owner, ks=(k,), chunk_size=1)
        expected_i2t = enumerated_recall(scores, [set(np.flatnonzero(owner == i)) for i in range(3)], k)
        expected_t2i = enumerated_recall(scores.T, [{o} for o in owner], k)
        assert result[f"r{k}_i2t"] == pytest.approx(expected_i2t)
        assert result[f"r{k}_t2i"] == pytest.approx(expected_t2i)
        optimistic = long_text_retrieval(np.eye(3), scores.T.copy(), owner, ks=(k,), tie_rule="optimistic")
        pessimistic = long_text_retrieval(np.eye(3), scores.T.copy(), owner, ks=(k,), tie_rule="pessimistic")
        assert pessimistic[f"r{k}_i2t"] <= result[f"r{k}_i2t"] <= optimistic[f"r{k}_i2t"]


def test_hit_credit_formula_by_hand():
    # g above, n tied negatives, p tied positives: 1 - C(n, m) / C(n + p, m), m = clamp(K - g, 0, n + p)
    above, negatives = torch.tensor([0, 1, 0, 0, 2]), torch.tensor([1, 2, 3, 0, 0])
    positives = torch.tensor([1, 1, 2, 3, 1])
    fair = hit_credit(above, negatives, positives, 2, "fair").tolist()
    assert fair == pytest.approx([1.0, 1 / 3, 1 - math.comb(3, 2) / math.comb(5, 2), 1.0, 0.0])
    assert hit_credit(above, negatives, positives, 2, "optimistic").tolist() == [1, 1, 1, 1, 0]
    assert hit_credit(above, negatives, positives, 2, "pessimistic").tolist() == [1, 0, 0, 1, 0]


def test_folds_multi_positive_and_cxc_follow_the_rule():
    images, texts = np.eye(2), np.ones((2, 2))  # every text scores 1 with every image
    for rule, r1 in (("fair", 50.0), ("optimistic", 100.0), ("pessimistic", 0.0)):
        with pytest.warns(DegenerateEmbeddingsWarning):
            folds = fold_retrieval(np.eye(2).repeat(2, 0), np.ones((4, 2)), [0, 1, 2, 3], num_folds=2, ks=(1,),
                                   tie_rule=rule)
        assert folds["r1_i2t"] == r1 and folds["tie_rule"] == rule
        assert multi_positive_recall(images, texts, [[0], [1]], ks=(1,), tie_rule=rule)["r1"] == r1
        cxc = cxc_retrieval(images, texts, [[0], [1]], [[0], [1]], [[1], [0]], [[1], [0]], ks=(1,), tie_rule=rule)
        assert cxc["r1_i2t"] == r1 and cxc["r1_t2t"] == 100.0 and cxc["tie_rule"] == rule  # one other text: no tie
    # two positives tied with each other and one negative: fair credit 1 - C(1, 1) / C(3, 1) = 2/3
    assert multi_positive_recall([[1.0]], [[1.0], [1.0], [1.0]], [[0, 1]], ks=(1,))["r1"] == pytest.approx(200 / 3)


def test_zero_shot_ties():
    scores = np.array([[0.5, 0.5, 0.5, 0.1]])  # true class 0 tied with two others
    expected = {"fair": (100 / 3, 200 / 3), "optimistic": (100.0, 100.0), "pessimistic": (0.0, 0.0)}
    for rule, (top1, top2) in expected.items():
        result = zero_shot_classification(scores, np.eye(4), [0], ks=(1, 2), tie_rule=rule)
        assert (result["top1"], result["top2"]) == (pytest.approx(top1), pytest.approx(top2))


def test_pair_and_shared_text_recalls():
    images = torch.eye(2)
    same = torch.ones(2, 2) / math.sqrt(2)
    for rule, r1 in (("fair", 50.0), ("optimistic", 100.0), ("pessimistic", 0.0)):
        assert pair_recall_at_1(images, same, [(0, 1)], tie_rule=rule) == (r1, r1)
    # images 0 and 1 share text 0, image 2 has text 1; image 0 scores both texts alike
    image_embeds = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    text_embeds = torch.eye(2)
    owners = torch.tensor([0, 0, 1])
    # I2T: image 0 tied (1/2), images 1, 2 right. T2I: text 0's carriers (images 0, 1) tie with each other at 1
    # and beat image 2 (0): a hit; text 1: image 2 ties with image 0 at 1: 1/2
    assert recall_at_1_by_text(image_embeds, text_embeds, owners) == (pytest.approx(250 / 3), 75.0)
    assert recall_at_1_by_text(image_embeds, text_embeds, owners, tie_rule="optimistic") == (100.0, 100.0)
    assert recall_at_1_by_text(image_embeds, text_embeds, owners, tie_rule="pessimistic") == (
        pytest.approx(200 / 3), 50.0)


def test_evaluate_module_takes_the_rule(isolated_modules_cache):
    retrieval = load("long_text_retrieval", keep_in_memory=True)
    for rule, r1 in (("fair", 50.0), ("optimistic", 100.0), ("pessimistic", 0.0)):
        with pytest.warns(DegenerateEmbeddingsWarning):
            result = retrieval.compute(text_embeds=[[0.6, 0.8]] * 2, text_to_image=[0, 1],
                                       image_embeds=[[1.0, 0.0], [0.0, 1.0]], ks=(1,), tie_rule=rule)
        assert result["r1_i2t"] == r1 and result["tie_rule"] == rule


@pytest.mark.parametrize("call", [
    lambda rule: recall_at_k(torch.eye(2), 1, tie_rule=rule),
    lambda rule: long_text_retrieval(np.eye(2), np.eye(2), [0, 1], tie_rule=rule),
    lambda rule: zero_shot_classification(np.eye(2), np.eye(2), [0, 1], ks=(1,), tie_rule=rule),
])
def test_unknown_rule_is_named(call):
    with pytest.raises(ValueError, match=r"tie_rule must be one of \('fair', 'optimistic', 'pessimistic'\), got 'rand"):
        call("random")
    assert TIE_RULES == ("fair", "optimistic", "pessimistic")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_recall_at_k_counts_exactly_in_low_precision_and_leaves_its_input(dtype):
    # 600 columns: bfloat16 sums of 1s stop being exact at 256, float16 at 2048; row 0 ties with 299 others at 1.0
    similarity = torch.zeros(600, 600, dtype=dtype)
    similarity[0, :300] = 1.0
    similarity.fill_diagonal_(0.5)
    similarity[0, 0] = 1.0
    before = similarity.clone()
    # row 0: its item ties with 299 others at 1.0 (1/300 at R@1); every other row: its 0.5 above zeros (a hit)
    expected = (1 / 300 + 599) / 600 * 100
    assert recall_at_k(similarity, 1) == pytest.approx(expected)
    assert torch.equal(similarity, before)
