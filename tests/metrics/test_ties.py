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
from hf_longclip.metrics.ties import (
    INDEX_RULES,
    TIE_RULES,
    hit_credit,
    increasing_credit,
    pairwise_credit,
    tied_pair_sign,
)
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
    with pytest.raises(ValueError, match=r"tie_rule must be one of \('fair', 'optimistic', 'pessimistic', 'first', "
                                         r"'last'\), got 'rand"):
        call("random")
    assert TIE_RULES == ("fair", "optimistic", "pessimistic", "first", "last")


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


def ranked_by_position(scores: np.ndarray, positives: list[set[int]], k: int, rule: str) -> float:
    """Percent of hits at k when each query sorts its candidates by score and tied ones by index: the lower first
    under "first", the higher first under "last"."""
    hits = []
    for row, positive in zip(scores, positives):
        order = sorted(range(len(row)), key=lambda i: (-row[i], i if rule == "first" else -i))
        hits.append(any(i in positive for i in order[:k]))
    return 100 * float(np.mean(hits))


@pytest.mark.filterwarnings("ignore::hf_longclip.metrics.retrieval.DegenerateEmbeddingsWarning")
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", INDEX_RULES)
def test_position_rules_rank_tied_candidates_by_index(seed, rule):
    rng = np.random.default_rng(seed)
    owner = np.array([0, 0, 0, 1, 1, 2, 3])
    scores = rng.integers(0, 3, (4, 7)).astype(float)  # small integers: ties everywhere
    square = rng.integers(0, 3, (6, 6)).astype(float)
    for k in (1, 2, 3):
        result = long_text_retrieval(np.eye(4), scores.T.copy(), owner, ks=(k,), chunk_size=2, tie_rule=rule)
        assert result[f"r{k}_i2t"] == pytest.approx(
            ranked_by_position(scores, [set(np.flatnonzero(owner == i)) for i in range(4)], k, rule))
        assert result[f"r{k}_t2i"] == pytest.approx(ranked_by_position(scores.T, [{o} for o in owner], k, rule))
        expected = ranked_by_position(square, [{i} for i in range(6)], k, rule)
        assert recall_at_k(torch.tensor(square), k, tie_rule=rule) == pytest.approx(expected)
        assert zero_shot_classification(square, np.eye(6), range(6), ks=(k,), tie_rule=rule)[f"top{k}"] == (
            pytest.approx(expected))
        sets = [[0, 4], [1], [2, 3, 5], [], [5], [0, 1]]
        multi = multi_positive_recall(np.eye(6), square.T.copy(), sets, ks=(k,), tie_rule=rule, chunk_size=4)
        assert multi[f"r{k}"] == pytest.approx(ranked_by_position(square[[0, 1, 2, 4, 5]],
                                                                   [set(p) for p in sets if p], k, rule))


def long_clip_urban1k(similarity: torch.Tensor) -> float:
    """Long-CLIP eval/retrieval/Urban1k.py (beichenzbc/Long-CLIP, commit 3966af9; HiMo-CLIP's Urban1k.py and
    docci.py alike): a query is right when ``torch.argmax`` of its row (the first maximal index) is its own item."""
    return 100 * sum(int(torch.argmax(row)) == i for i, row in enumerate(similarity)) / len(similarity)


def long_clip_coco_i2t(similarity: torch.Tensor, k: int, per_image: int) -> float:
    """Long-CLIP eval/retrieval/coco.py (commit 3966af9; HiMo-CLIP's and TULIP's eval/coco.py alike), image to
    text: a hit when one of image i's captions (texts per_image * i + j) is in ``pred.argsort()[-k:]``. The code
    sorts CUDA rows of 25,000 (and 5,000) scores, over 4,096: PyTorch's stable segmented radix sort, hence
    ``stable=True`` here (the CPU's default sort is not stable beyond 16 entries)."""
    hits = 0
    for i, pred in enumerate(similarity):
        b = pred.argsort(stable=True)[-k:]
        hits += any(per_image * i + j in b for j in range(per_image))
    return 100 * hits / len(similarity)


def long_clip_flickr_t2i(similarity: torch.Tensor, k: int, per_image: int) -> float:
    """Long-CLIP eval/retrieval/flickr30k.py (commit 3966af9; HiMo-CLIP's and TULIP's alike), text to image: a hit
    when the caption's image is in ``sim.softmax(dim=-1)[i].topk(k)`` on CUDA. PyTorch's CUDA top-k
    (aten/src/ATen/native/cuda/TensorTopK.cu, ``gatherTopK``) takes the values above the k-th one, then the values
    equal to it in index order ("the first seen set"): emulated here, as this machine has no CUDA."""
    hits = 0
    for i, pred in enumerate(similarity.softmax(dim=-1)):
        kth = pred.sort(descending=True).values[k - 1]
        chosen = torch.cat([torch.nonzero(pred > kth).flatten(), torch.nonzero(pred == kth).flatten()])[:k]
        hits += i // per_image in chosen
    return 100 * hits / len(similarity)


@pytest.mark.filterwarnings("ignore::hf_longclip.metrics.retrieval.DegenerateEmbeddingsWarning")
@pytest.mark.parametrize("seed", range(3))
def test_position_rules_reproduce_the_benchmark_codes(seed):
    """Urban1k's and DOCCI's argmax and Flickr30k's CUDA top-k break ties as "first", COCO's ascending argsort as
    "last" (hf-longclip eval's defaults for those protocols); the fair rule differs on these ties."""
    generator = torch.Generator().manual_seed(seed)
    # one-hot images and 3 captions per image whose embeddings are small integers: many exact ties
    images = torch.eye(6, dtype=torch.float64)
    texts = torch.randint(0, 3, (18, 6), generator=generator).double()
    owner = torch.arange(6).repeat_interleave(3)
    similarity = images @ texts.T  # (6, 18)
    for k in (1, 2, 5):
        last = long_text_retrieval(images, texts, owner, ks=(k,), tie_rule="last")[f"r{k}_i2t"]
        assert last == pytest.approx(long_clip_coco_i2t(similarity, k, 3))
        first = long_text_retrieval(images, texts, owner, ks=(k,), tie_rule="first")[f"r{k}_t2i"]
        assert first == pytest.approx(long_clip_flickr_t2i(similarity.T, k, 3))
    square = torch.randint(0, 3, (8, 8), generator=generator).double()
    assert recall_at_k(square, 1, tie_rule="first") == pytest.approx(long_clip_urban1k(square))
    assert long_text_retrieval(torch.eye(8).double(), square.T, range(8), ks=(1,), tie_rule="first")["r1_i2t"] == (
        pytest.approx(long_clip_urban1k(square)))
    fair = long_text_retrieval(images, texts, owner, ks=(1,))  # the library's default: the expectation, not the code
    assert fair["r1_i2t"] != pytest.approx(long_clip_coco_i2t(similarity, 1, 3))


def test_position_rules_need_the_positions():
    with pytest.raises(ValueError, match="breaks ties by position: pass tied_ahead"):
        hit_credit(torch.tensor([0]), torch.tensor([1]), torch.tensor([1]), 1, "first")
    with pytest.raises(ValueError, match="breaks ties by position: pass own_first"):
        pairwise_credit(torch.tensor([0.0]), "last")
    assert pairwise_credit(torch.tensor([0.0, 0.0, 1.0]), "first", own_first=torch.tensor([True, False, False])
                           ).tolist() == [1.0, 0.0, 1.0]
    assert increasing_credit([1, 1, 2], "first") == 1.0 and increasing_credit([1, 1, 2], "last") == 0.0
    assert tied_pair_sign("first") == 1.0 and tied_pair_sign("last") == -1.0
    # pairs: a tie goes to the pair's first item under "first"
    images, same = torch.eye(2), torch.ones(2, 2) / math.sqrt(2)
    assert pair_recall_at_1(images, same, [(0, 1)], tie_rule="first") == (50.0, 50.0)
    image_embeds, owners = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 0, 1])
    # I2T: image 0 ties texts 0 (its own, first) and 1: a hit under "first"; T2I: text 1 ties images 0 and 2 (its
    # carrier, last): a miss under "first", a hit under "last"
    assert recall_at_1_by_text(image_embeds, torch.eye(2), owners, tie_rule="first") == (100.0, 50.0)
    assert recall_at_1_by_text(image_embeds, torch.eye(2), owners, tie_rule="last") == (pytest.approx(200 / 3), 100.0)
