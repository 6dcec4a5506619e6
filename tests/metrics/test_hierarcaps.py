"""HierarCaps metrics: Kendall tau-b and the official tie rule of d_corr by hand, a hand-built geometry, and
transcriptions of the authors' evaluation loop (github.com/TAU-VAILab/hierarcaps,
code/evaluation/hierarchical_retrieval.py, `HCEvaluator.run`, commit ab0166c) on random data, with tied radii and
tied texts: the defaults give its numbers."""

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest
import torch

import hf_longclip.metrics as metrics
from hf_longclip.metrics import hierarcaps, kendall_tau_b, text_pool
from hf_longclip.metrics.hierarcaps import _tau_with_levels


@pytest.mark.parametrize(
    "x, y, expected",
    [
        ([1, 2, 3, 4], [1, 2, 3, 4], 1.0),
        ([4, 3, 2, 1], [1, 2, 3, 4], -1.0),
        ([2, 1, 3, 4], [1, 2, 3, 4], 2 / 3),  # 5 concordant, 1 discordant of 6 pairs
        ([0.3, 0.1, 0.2, 0.4], [1, 2, 3, 4], 1 / 3),  # P = 4, Q = 2
        ([1, 1, 2, 3], [1, 2, 3, 4], 5 / math.sqrt(5 * 6)),  # one pair tied in x: P = 5, T_x = 1
        ([1, 1, 2, 2], [1, 2, 2, 3], 3 / math.sqrt(5 * 4)),  # P = 3, Q = 0, T_x = 2, T_y = 1
        ([1, 2, 3], [3, 1, 2], -1 / 3),  # P = 1, Q = 2
    ],
)
def test_kendall_tau_b_by_hand(x, y, expected):
    assert kendall_tau_b(x, y) == pytest.approx(expected)
    assert kendall_tau_b(y, x) == pytest.approx(expected)


def test_kendall_tau_b_degenerate():
    assert math.isnan(kendall_tau_b([1, 1, 1, 1], [1, 2, 3, 4]))
    with pytest.raises(ValueError, match="same length >= 2"):
        kendall_tau_b([1, 2, 3], [1, 2])


def test_argsort_of_radii_gives_the_same_tau():
    """The reference code correlates radii.argsort() (not the radii) with [1, 2, 3, 4]: equal without ties."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        radii = rng.random(4)
        assert kendall_tau_b(np.argsort(radii), [1, 2, 3, 4]) == pytest.approx(kendall_tau_b(radii, [1, 2, 3, 4]))


def official_tau(row) -> float:
    """The reference rule: tau of the radii's argsort against the levels. The code's radii are a CPU torch tensor,
    whose argsort keeps ties in level order (np.argsort need not: its SIMD sort may reorder ties). A row of
    (value, priority) pairs is sorted by value, then priority (a tie-breaker)."""
    if isinstance(row[0], tuple):
        return kendall_tau_b(sorted(range(len(row)), key=lambda i: row[i]), [1, 2, 3, 4])
    return kendall_tau_b(torch.as_tensor(np.asarray(row)).argsort(dim=-1).numpy(), [1, 2, 3, 4])


# Pairs (1,2) (1,3) (1,4) (2,3) (2,4) (3,4); P / Q = concordant / discordant, T = tied in the radii.
# official with tie_rule="optimistic" (the code's): argsort keeps a tie in level order, so a tied pair counts as
# concordant: (P + T - Q) / 6; "fair": in order on a coin toss, (P - Q) / 6; "pessimistic": (P - T - Q) / 6.
# tau-b: a tied pair counts as neither: (P - Q) / sqrt((P + Q + T) * 6).
TIE_CASES = [
    # + + + = + +: P = 5, T = 1. official (5 + 1) / 6 = 1, fair 5/6, pessimistic 4/6; tau-b 5 / sqrt(5 * 6)
    ([0.1, 0.3, 0.3, 0.5], 1.0, 5 / 6, 4 / 6, 5 / math.sqrt(30)),
    # = = + = + +: P = 3, T = 3. official (3 + 3) / 6 = 1, fair 1/2, pessimistic 0; tau-b 3 / sqrt(3 * 6)
    ([0.2, 0.2, 0.2, 0.4], 1.0, 1 / 2, 0.0, 1 / math.sqrt(2)),
    # = - + - + +: P = 3, Q = 2, T = 1. official (3 + 1 - 2) / 6 = 1/3, fair 1/6, pessimistic 0; tau-b 1 / sqrt 30
    ([0.3, 0.3, 0.1, 0.5], 1 / 3, 1 / 6, 0.0, 1 / math.sqrt(30)),
    # all tied: T = 6. official argsort [0, 1, 2, 3] -> 1, fair 0, pessimistic -1; tau-b undefined, counted as 0
    ([0.4, 0.4, 0.4, 0.4], 1.0, 0.0, -1.0, 0.0),
]


@pytest.mark.parametrize("radii, official, fair, pessimistic, tau_b", TIE_CASES)
def test_tie_rules_by_hand(radii, official, fair, pessimistic, tau_b):
    assert official != pytest.approx(tau_b)
    assert official_tau(radii) == pytest.approx(official)
    values = torch.tensor([radii], dtype=torch.float64)
    assert _tau_with_levels(values, "official", "optimistic").item() == pytest.approx(official)
    assert _tau_with_levels(values, "official", "fair").item() == pytest.approx(fair)
    assert _tau_with_levels(values, "official", "pessimistic").item() == pytest.approx(pessimistic)
    for rule in ("fair", "optimistic", "pessimistic"):
        assert _tau_with_levels(values, "tau_b", rule).item() == pytest.approx(tau_b)


def test_official_rule_matches_scipy_on_argsort():
    kendalltau = pytest.importorskip("scipy.stats").kendalltau
    rows = torch.randint(0, 3, (200, 4), generator=torch.Generator().manual_seed(0)).double()  # ties everywhere
    expected = [kendalltau(row.argsort().numpy(), [1, 2, 3, 4]).statistic for row in rows]
    assert _tau_with_levels(rows, "official", "optimistic").tolist() == pytest.approx(expected)
    tau_b = np.nan_to_num([kendalltau(row.numpy(), [1, 2, 3, 4]).statistic for row in rows])
    assert _tau_with_levels(rows, "tau_b", "fair").tolist() == pytest.approx(tau_b.tolist())
    # fair: the code's tau averaged over every random tie-breaker (a priority order of the 4 values)
    orders = list(itertools.permutations(range(4)))
    fair = [np.mean([official_tau([(value, priority) for value, priority in zip(row.tolist(), order)])
                     for order in orders]) for row in rows]
    assert _tau_with_levels(rows, "official", "fair").tolist() == pytest.approx(fair)


def direction(plane_axis: int, degrees: float) -> np.ndarray:
    """Unit vector at ``degrees`` from the root e_0 towards e_{plane_axis}."""
    v = np.zeros(3)
    v[0], v[plane_axis] = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return v


# Root e_0. Chain A lies towards e_1 at 10, 20, 30, 40 degrees from the root, its image at 27 degrees; chain B
# towards e_2 at 5, 35, 50, 60 degrees, its image at 57 degrees. The radius grows with the angle, so the thresholds
# uncover B1 (5), A1, A2, A3, B2, A4, B3, B4 in this order.
# Image A retrieves B1 (the only text in reach), then A1, A2, A3 (3 degrees away; B2, A4 and the rest are farther):
#   precision 3/4, levels 1-3 recalled. Image B retrieves B1 (A's texts are all worse), B2, B3, B4: precision 1.
# d_corr: both chains' radii increase -> 1. d_corr_image: A's distances to its image 17, 7, 3, 13 degrees ->
# tau(-d, levels) = (4 - 2) / 6 = 1/3; B's 52, 22, 7, 3 -> 1; mean 2/3.
GEOMETRY_TEXTS = [direction(1, a) for a in (10, 20, 30, 40)] + [direction(2, a) for a in (5, 35, 50, 60)]
GEOMETRY_CHAINS = [[0, 1, 2, 3], [4, 5, 6, 7]]
GEOMETRY_IMAGES = [direction(1, 27), direction(2, 57)]
GEOMETRY_ROOT = np.array([1.0, 0.0, 0.0])


def test_hand_built_geometry():
    result = hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, GEOMETRY_CHAINS, GEOMETRY_ROOT)
    assert result.pop("tie_rule") == "first"  # the official evaluator's
    assert result == pytest.approx({
        "precision": (3 / 4 + 1) / 2, "recall": (3 / 4 + 1) / 2,
        "recall_level_1": 1.0, "recall_level_2": 1.0, "recall_level_3": 1.0, "recall_level_4": 0.5,
        "d_corr": 1.0, "d_corr_image": (1 / 3 + 1) / 2, "num_images": 2, "num_chains": 2,
    })


@pytest.mark.parametrize("rule, credit", [("fair", 0.5), ("optimistic", 1.0), ("pessimistic", 0.0), ("first", 1.0),
                                          ("last", 0.0)])
def test_texts_of_one_embedding_are_one_retrieved_text_credited_by_the_tie_rule(rule, credit):
    # text 8: a text outside the chains with A3's embedding (say, a caption equal to A3 up to the token limit).
    # Image A retrieves B1, A1, A2 and then A3 or text 8: a hit with probability 1/2 when the tie is broken at random;
    # the code's argmax takes the first in pool order, A3 (text 2): "first", the default.
    texts = [*GEOMETRY_TEXTS, GEOMETRY_TEXTS[2]]
    result = hierarcaps(GEOMETRY_IMAGES, texts, GEOMETRY_CHAINS, GEOMETRY_ROOT, tie_rule=rule)
    assert result["precision"] == pytest.approx(((2 + credit) / 4 + 1) / 2)
    assert result["recall_level_3"] == pytest.approx((credit + 1) / 2)
    assert result["recall"] == pytest.approx(((2 + credit) / 4 + 1) / 2)
    assert result["tie_rule"] == rule
    # without the twin every rule gives the code's numbers
    plain = hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, GEOMETRY_CHAINS, GEOMETRY_ROOT, tie_rule=rule)
    assert plain["precision"] == pytest.approx(7 / 8) and plain["recall_level_3"] == 1.0


def test_embeddings_are_normalised_inside():
    rng = np.random.default_rng(1)
    scaled = hierarcaps(
        np.array(GEOMETRY_IMAGES) * rng.uniform(0.1, 10, (2, 1)),
        np.array(GEOMETRY_TEXTS) * rng.uniform(0.1, 10, (8, 1)),
        GEOMETRY_CHAINS,
        GEOMETRY_ROOT * 3.0,
    )
    assert scaled == pytest.approx(hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, GEOMETRY_CHAINS, GEOMETRY_ROOT))


def test_one_threshold_retrieves_only_the_innermost_text():
    result = hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, GEOMETRY_CHAINS, GEOMETRY_ROOT, num_thresholds=1)
    assert result["precision"] == 0.5  # both retrieve B1 only: wrong for A, right for B
    assert result["recall_level_1"] == 0.5 and result["recall_level_2"] == 0.0
    assert result["recall"] == pytest.approx(0.125)


def test_reversed_chain_gives_negative_d_corr():
    reversed_chains = [chain[::-1] for chain in GEOMETRY_CHAINS]
    result = hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, reversed_chains, GEOMETRY_ROOT)
    assert result["d_corr"] == -1.0
    assert result["d_corr_image"] == pytest.approx(-2 / 3)


@pytest.mark.parametrize("method, rule, tau", [("official", "first", 1.0), ("official", "optimistic", 1.0),
                                              ("official", "fair", 0.0), ("official", "pessimistic", -1.0),
                                              ("official", "last", -1.0), ("tau_b", "fair", 0.0)])
def test_chain_of_one_repeated_text(method, rule, tau):
    # all four levels the same text: radii and distances tie everywhere; the official argsort is [0, 1, 2, 3] -> 1,
    # fair 0, pessimistic -1; tau-b is undefined and counts as 0. Chain B is in order: 1.
    chains = [[2, 2, 2, 2], [4, 5, 6, 7]]
    result = hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, chains, GEOMETRY_ROOT, d_corr_method=method, tie_rule=rule)
    assert result["d_corr"] == (tau + 1) / 2 and result["d_corr_image"] == (tau + 1) / 2
    assert result["recall_level_4"] == 1.0  # image A retrieves text 2, its only ground truth at every level


# Chains repeating a level in the hand-built geometry (radii grow with the angle: text 0..3 at 10, 20, 30, 40
# degrees towards e_1, 4..7 at 5, 35, 50, 60 towards e_2), with (official, tau-b) from TIE_CASES:
#   [0, 1, 1, 3] radii 10, 20, 20, 40: (1, 5/sqrt 30); [1, 1, 0, 3] 20, 20, 10, 40: (1/3, 1/sqrt 30);
#   [4, 4, 4, 7] 5, 5, 5, 60: (1, 1/sqrt 2); [2, 2, 2, 2]: (1, 0).
# d_corr_image, minus the angles to the image (A at 27 degrees towards e_1, B at 57 towards e_2):
#   [0, 1, 1, 3] on A: -17, -7, -7, -13: P = 3, Q = 2, T = 1 -> (1/3, 1/sqrt 30);
#   [1, 1, 0, 3] on A: -7, -7, -17, -13: P = 1, Q = 4, T = 1 -> ((1 + 1 - 4)/6 = -1/3, -3/sqrt 30);
#   [4, 4, 4, 7] on B: -52, -52, -52, -3: P = 3, T = 3 -> (1, 1/sqrt 2); [2, 2, 2, 2] on A: (1, 0).
TIE_CHAINS, TIE_OWNERS = [[0, 1, 1, 3], [1, 1, 0, 3], [4, 4, 4, 7], [2, 2, 2, 2]], [0, 0, 1, 0]
# fair (a tied pair counts 0): d_corr 5/6, 1/6, 1/2, 0; d_corr_image 1/6, (1 - 4)/6 = -1/2, 1/2, 0.
TIE_EXPECTED = {
    "official": {"d_corr": (1 + 1 / 3 + 1 + 1) / 4, "d_corr_image": (1 / 3 - 1 / 3 + 1 + 1) / 4},
    "fair": {"d_corr": (5 / 6 + 1 / 6 + 1 / 2 + 0) / 4, "d_corr_image": (1 / 6 - 1 / 2 + 1 / 2 + 0) / 4},
    "tau_b": {"d_corr": (6 / math.sqrt(30) + 1 / math.sqrt(2)) / 4,
              "d_corr_image": (-2 / math.sqrt(30) + 1 / math.sqrt(2)) / 4},
}
TIE_ARGUMENTS = {"official": {"d_corr_method": "official", "tie_rule": "first"},
                 "fair": {"d_corr_method": "official", "tie_rule": "fair"}, "tau_b": {"d_corr_method": "tau_b"}}


@pytest.mark.parametrize("method", ["official", "fair", "tau_b"])
def test_d_corr_methods_on_tied_chains(method):
    result = hierarcaps(GEOMETRY_IMAGES, GEOMETRY_TEXTS, TIE_CHAINS, GEOMETRY_ROOT, chain_to_image=TIE_OWNERS,
                        **TIE_ARGUMENTS[method])
    assert {k: result[k] for k in ("d_corr", "d_corr_image")} == pytest.approx(TIE_EXPECTED[method])


def test_d_corr_defaults_to_the_official_formula_with_the_official_ties():
    args = (GEOMETRY_IMAGES, GEOMETRY_TEXTS, TIE_CHAINS, GEOMETRY_ROOT)
    result = hierarcaps(*args, chain_to_image=TIE_OWNERS)
    assert result == hierarcaps(*args, chain_to_image=TIE_OWNERS, d_corr_method="official", tie_rule="first")
    assert result["d_corr"] == pytest.approx(5 / 6) and result["d_corr_image"] == pytest.approx(1 / 2)
    optimistic = hierarcaps(*args, chain_to_image=TIE_OWNERS, tie_rule="optimistic")
    assert {k: optimistic[k] for k in ("d_corr", "d_corr_image")} == {k: result[k] for k in ("d_corr", "d_corr_image")}


def test_hierarcaps_module_d_corr_method(isolated_modules_cache):
    chain_texts = [[f"t{i}" for i in chain] for chain in TIE_CHAINS]
    chain_embeds = np.array(GEOMETRY_TEXTS)[TIE_CHAINS]
    kwargs = dict(chain_embeds=chain_embeds, chain_texts=chain_texts, chain_to_image=TIE_OWNERS,
                  image_embeds=np.array(GEOMETRY_IMAGES), root_embed=GEOMETRY_ROOT)
    metric = metrics.load("hierarcaps", keep_in_memory=True)
    results = {None: metric.compute(**kwargs)}
    for method in ("official", "fair", "tau_b"):
        results[method] = metric.compute(**kwargs, **TIE_ARGUMENTS[method])
        assert {k: results[method][k] for k in TIE_EXPECTED[method]} == pytest.approx(TIE_EXPECTED[method])
    assert results[None] == results["official"]  # the module's default: the official evaluator's ties


def reference_hierarcaps(image_embeds, chain_embeds, chain_texts, chain_to_image, root, steps):
    """The reference `HCEvaluator.run`, transcribed: a pool of every chain's texts with repeats, string matching,
    masked argmax per threshold, set precision, any-chain recall per level, Kendall tau of argsorted radii
    (torch's argsort on CPU, as the code)."""
    norm = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    root, images, es = norm(np.asarray(root)), norm(np.asarray(image_embeds)), norm(np.asarray(chain_embeds))
    radii = np.linalg.norm(es - root, axis=-1)  # (n, 4)
    masks = [radii <= t for t in np.linspace(radii.min(), radii.max(), steps)]
    texts = np.array(chain_texts, dtype=object)
    precisions, recalls, levels = [], [], []
    for i, image in enumerate(images):
        sims = es @ image
        preds = []
        for mask in masks:
            t = texts[mask][sims[mask].argmax()]
            if not preds or preds[-1] != t:
                preds.append(t)
        gts = [texts[j] for j in range(len(texts)) if chain_to_image[j] == i]
        s_preds, s_gts = set(preds), {t for chain in gts for t in chain}
        tp, fp = len(s_preds & s_gts), len(s_preds - s_gts)
        precisions.append(tp / max(1, tp + fp))
        hits = [any(chain[level] in s_preds for chain in gts) for level in range(4)]
        levels.append(hits)
        recalls.append(sum(hits) / 4)
    d_corr = np.mean([official_tau(row) for row in radii])
    return {"precision": np.mean(precisions), "recall": np.mean(recalls), "d_corr": d_corr,
            **{f"recall_level_{level + 1}": np.mean([h[level] for h in levels]) for level in range(4)}}


@pytest.mark.parametrize("steps", [50, 7])
def test_matches_reference_loop_with_shared_texts_and_several_chains(steps):
    rng = np.random.default_rng(2)
    d, num_images = 6, 9
    # generic levels draw from few strings ("food", "animal", ...), specific ones from many: texts are shared
    vocab = [[f"l{level}w{w}" for w in range(n)] for level, n in enumerate((3, 5, 12, 30))]
    embed_of = {t: rng.standard_normal(d) for words in vocab for t in words}
    root = rng.standard_normal(d)
    for level, words in enumerate(vocab):  # generic texts near the root, specific ones farther
        for t in words:
            embed_of[t] = root * (3 - level) + embed_of[t]
    chain_to_image = np.concatenate([np.arange(num_images), rng.integers(0, num_images, 5)])
    chain_texts = [[str(rng.choice(words)) for words in vocab] for _ in chain_to_image]
    for chain in chain_texts[::3]:  # some chains repeat a level: tied radii and distances
        level = int(rng.integers(0, 3))
        chain[level + 1] = chain[level]
    chain_embeds = np.array([[embed_of[t] for t in chain] for chain in chain_texts])
    images = np.array([np.mean([embed_of[t] for c, chain in enumerate(chain_texts) if chain_to_image[c] == i
                                for t in chain], axis=0) for i in range(num_images)]) + rng.standard_normal((9, d))

    texts, text_embeds, chains = text_pool(chain_texts, chain_embeds)
    assert len(texts) < 4 * len(chain_texts)  # strings are shared between chains
    assert [[texts[i] for i in chain] for chain in chains.tolist()] == chain_texts
    # the reference counts a tied pair of d_corr as in order: the default rule, "first" (the fair one differs)
    result = hierarcaps(images, text_embeds, chains, root, chain_to_image=chain_to_image, num_thresholds=steps)
    expected = reference_hierarcaps(images, chain_embeds, chain_texts, chain_to_image, root, steps)
    assert {k: result[k] for k in expected} == pytest.approx(expected)
    assert 0 < result["precision"] < 1 and 0 < result["recall"] < 1 and 0 < result["d_corr"] <= 1
    assert result["num_images"] == num_images and result["num_chains"] == len(chain_texts)

    # d_corr_image by hand: tau of minus the distance of each chain's texts to its image, ties as d_corr's
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    distances = np.linalg.norm(unit(chain_embeds) - unit(images)[chain_to_image][:, None], axis=-1)
    assert result["d_corr_image"] == pytest.approx(np.mean([official_tau(-row) for row in distances]))

    # tau-b: the radii and distances themselves, ties counted as neither; differs here because of the ties
    tau_b = hierarcaps(images, text_embeds, chains, root, chain_to_image=chain_to_image, num_thresholds=steps,
                       d_corr_method="tau_b")
    radii = np.linalg.norm(unit(chain_embeds) - unit(root), axis=-1)
    assert tau_b["d_corr"] == pytest.approx(np.mean([kendall_tau_b(row, [1, 2, 3, 4]) for row in radii]))
    assert tau_b["d_corr_image"] == pytest.approx(np.mean([kendall_tau_b(-row, [1, 2, 3, 4]) for row in distances]))
    assert tau_b["d_corr"] < result["d_corr"] and tau_b["d_corr_image"] < result["d_corr_image"]
    others = lambda r: {k: v for k, v in r.items() if not k.startswith("d_corr")}  # noqa: E731
    assert others(tau_b) == others(result)


def test_text_pool_keeps_first_embedding_of_repeated_text():
    embeds = torch.arange(2 * 4 * 2, dtype=torch.float32).view(2, 4, 2) + 1
    texts, pool, chains = text_pool([["a", "b", "c", "d"], ["a", "e", "c", "f"]], embeds)
    assert texts == ["a", "b", "c", "d", "e", "f"]
    assert chains.tolist() == [[0, 1, 2, 3], [0, 4, 2, 5]]
    assert torch.equal(pool[0], embeds[0, 0]) and torch.equal(pool[4], embeds[1, 1])


G_IMAGES, G_TEXTS, G_CHAINS, G_ROOT = GEOMETRY_IMAGES, GEOMETRY_TEXTS, GEOMETRY_CHAINS, GEOMETRY_ROOT


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((G_IMAGES, G_TEXTS, [[0, 1, 2], [4, 5, 6]], G_ROOT), {}, r"chains must have shape \(num_chains >= 1, 4\)"),
        ((G_IMAGES, G_TEXTS, [[0, 1, 2, 8], [4, 5, 6, 7]], G_ROOT), {},
         r"chains \(flattened\)\[3\] = 8 is out of range: must be in \[0, 8\) \(num_texts\)"),
        ((G_IMAGES, G_TEXTS, G_CHAINS[:1], G_ROOT), {}, "without chain_to_image, chain c belongs to image c"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, G_ROOT), {"chain_to_image": [0]}, "chain_to_image has 1 entries, expected 2"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, G_ROOT), {"chain_to_image": [1, 1]}, "image 0 has no chain"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, G_ROOT), {"chain_to_image": [0, 2]}, r"chain_to_image\[1\] = 2 is out of range"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, np.zeros(3)), {}, "root_embed has a zero vector"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, np.ones(4)), {}, "embedding dims differ: image_embeds has dim 3, root_embed"),
        ((G_IMAGES, np.ones((8, 2)), G_CHAINS, G_ROOT), {}, "embedding dims differ: image_embeds has dim 3, text_emb"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, [[1.0, 0.0, 0.0]]), {}, "root_embed must have 1 dims"),
        (([[np.nan, 0, 1], [0, 1, 0]], G_TEXTS, G_CHAINS, G_ROOT), {}, "image_embeds contains NaN or inf"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, G_ROOT), {"num_thresholds": 0}, "num_thresholds must be a positive integer"),
        ((G_IMAGES, G_TEXTS, G_CHAINS, G_ROOT), {"d_corr_method": "tau-b"},
         r"d_corr_method must be one of \('official', 'tau_b'\), got 'tau-b'"),
    ],
)
def test_bad_inputs_raise(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        hierarcaps(*args, **kwargs)


@pytest.mark.parametrize(
    "chain_texts, embeds, message",
    [
        ([["a", "b", "c", "d"]], np.ones((2, 4, 3)), r"chain_embeds must have shape \(num_chains=1, 4, dim\)"),
        ([["a", "b", "c", "d"]], np.ones((1, 3, 3)), r"chain_embeds must have shape \(num_chains=1, 4, dim\)"),
        ([["a", "b", "c"]], np.ones((1, 4, 3)), r"chain_texts\[0\] must be a list of 4 strings"),
        (["abcd"], np.ones((1, 4, 3)), r"chain_texts\[0\] must be a list of 4 strings"),
        ([["a", "b", "c", 4]], np.ones((1, 4, 3)), r"chain_texts\[0\] must be a list of 4 strings"),
        ([["a", "b", "c", "d"]], np.ones((1, 4)), "chain_embeds must have 3 dims"),
    ],
)
def test_text_pool_bad_inputs(chain_texts, embeds, message):
    with pytest.raises(ValueError, match=message):
        text_pool(chain_texts, embeds)


def hc_evaluator_run(image_embeds, chain_embeds, chain_texts, chain_to_image, root, steps=50, returned=None):
    """`HCEvaluator.run` of github.com/TAU-VAILab/hierarcaps, file code/evaluation/hierarchical_retrieval.py, at
    commit ab0166c451bb3b4ea20b9e8f847c7da12eb73701 (its last change; the repository's HEAD ba22b89 holds the same
    file), transcribed line by line from the embeddings on. What the model computes is given: ``root`` is
    `get_text_features("")`, ``chain_embeds[i]`` the features of row i's 4 texts (`embed(row)`), ``image_embeds[j]``
    image j's (`embed_img`); ``chain_texts[i]`` is `row2texts(row)`, ``chain_to_image[i]`` `img_fn2idx[row.img_fn]`.
    Float64 here (the code: float32 on its device), so that only the tie rules can differ.

    ``returned``: None runs the code as it is; {text: other text} replaces the text argmax returns (the first of tied
    texts in pool order) by another one of the same embedding, a tie broken otherwise (for the fair expectation)."""
    from scipy.stats import kendalltau

    root = torch.as_tensor(np.asarray(root), dtype=torch.float64)
    root /= root.norm()

    def embed(i):
        E = torch.as_tensor(np.asarray(chain_embeds[i]), dtype=torch.float64)
        E = E / E.norm(dim=-1)[:, None]
        return E

    def embed_img(j):
        E = torch.as_tensor(np.asarray(image_embeds[j]), dtype=torch.float64)
        E = E / E.norm()
        return E

    def get_dists(E):
        return (E - root[None]).norm(dim=-1)

    R = []  # radii
    Es = []
    VEs = [embed_img(j) for j in range(len(image_embeds))]
    v2t_indices = defaultdict(list)
    for i in range(len(chain_texts)):
        E = embed(i)
        Es.append(E)
        v2t_indices[chain_to_image[i]].append(i)
    Es = torch.stack(Es)
    VEs = torch.stack(VEs)

    Es_pos = Es[:, :4, :]
    Rs = (Es_pos - root).norm(dim=-1)
    rmin, rmax = Rs.min().item(), Rs.max().item()
    levels = np.linspace(rmin, rmax, steps)
    masks = [Rs <= thresh for thresh in levels]
    T = np.array([chain[:4] for chain in chain_texts])
    T_maskeds = [T[mask.numpy()] for mask in masks]

    recalls = []
    precisions = []
    for i in range(len(VEs)):
        VE = VEs[i]
        S = Es_pos @ VE
        preds = []
        for mask, Tm in zip(masks, T_maskeds):
            idx = S[mask].argmax().item()
            t = Tm[idx]
            t = (returned or {}).get(t, t)
            if len(preds) == 0 or preds[-1] != t:
                preds.append(t)
        t_indices = v2t_indices[i]
        gts = [T[j][:4] for j in t_indices]
        flat_gts = [t for x in gts for t in x]
        s_preds = set(preds)
        s_gts = set(flat_gts)
        tp = len(s_preds & s_gts)
        fp = len(s_preds - s_gts)
        precision = tp / max(1, tp + fp)
        r1 = any(x[0] in s_preds for x in gts)
        r2 = any(x[1] in s_preds for x in gts)
        r3 = any(x[2] in s_preds for x in gts)
        r4 = any(x[3] in s_preds for x in gts)
        recall = (r1 + r2 + r3 + r4) / 4.
        precisions.append(precision)
        recalls.append(recall)

    for i in range(len(chain_texts)):
        E = Es[i]
        radii = get_dists(E[:4]).cpu()
        R.append(radii)
    R = torch.stack(R)
    ranks = R.argsort(dim=-1)  # CPU, 4 values: ties stay in level order
    corrs = [kendalltau(row.cpu().numpy(), [1, 2, 3, 4])[0] for row in ranks]
    return {"d_corr": np.mean(corrs), "precision": np.mean(precisions), "recall": np.mean(recalls)}


def tied_hierarcaps_case(seed: int):
    """A HierarCaps-like test set whose chains repeat texts: a level repeating the one above (tied radii, as
    "dog" => "dog" => ...), texts shared between chains, and in odd cases two distinct strings with one embedding
    (e.g. captions equal up to a text encoder's token limit: tied similarities). Returns the `hierarcaps` inputs
    and the tied string pairs."""
    rng = np.random.default_rng(seed)
    d, num_images = 8, 6
    vocab = [[f"l{level}w{w}" for w in range(n)] for level, n in enumerate((2, 4, 8, 16))]
    root = rng.standard_normal(d)
    embed_of = {t: root * (3 - level) + rng.standard_normal(d) for level, words in enumerate(vocab) for t in words}
    twins = {}
    if seed % 2:  # a twin string of a level-2 and of a level-3 text: the same embedding, another string
        for original in (vocab[1][0], vocab[2][1]):
            twins[original] = original + " (truncated twin)"
            embed_of[twins[original]] = embed_of[original]
    chain_to_image = np.concatenate([np.arange(num_images), rng.integers(0, num_images, 4)])
    chain_texts = [[str(rng.choice(words)) for words in vocab] for _ in chain_to_image]
    for c, chain in enumerate(chain_texts):
        level = int(rng.integers(0, 3))
        chain[level + 1] = chain[level]  # a repeated text: two levels of the chain with one radius
        if twins and c % 3 == 1:  # the twins appear in some chains, after their originals in pool order
            chain[:] = [twins.get(t, t) for t in chain]
    chain_embeds = np.array([[embed_of[t] for t in chain] for chain in chain_texts])
    images = np.array([np.mean([embed_of[t] for c, chain in enumerate(chain_texts) if chain_to_image[c] == i
                                for t in chain], axis=0) for i in range(num_images)])
    images = images + 0.5 * rng.standard_normal(images.shape)
    return images, chain_embeds, chain_texts, chain_to_image, root, twins


@pytest.mark.parametrize("seed", range(10))
def test_default_is_the_official_evaluator_on_tied_radii_and_the_fair_rule_its_expectation(seed):
    """Ten test sets with repeated texts (tied radii in every chain; tied texts in odd ones): the defaults of the
    function, of `hf-longclip eval`'s task and of the evaluate module give `HCEvaluator.run`'s numbers (ties by
    position); tie_rule="fair" gives the expectation over random tie-breaks, which differs."""
    pytest.importorskip("scipy")
    images, chain_embeds, chain_texts, chain_to_image, root, twins = tied_hierarcaps_case(seed)
    official = hc_evaluator_run(images, chain_embeds, chain_texts, chain_to_image, root)
    texts, text_embeds, chains = text_pool(chain_texts, chain_embeds)
    assert len(texts) < 4 * len(chain_texts)
    result = hierarcaps(images, text_embeds, chains, root, chain_to_image=chain_to_image)
    assert result["tie_rule"] == "first"
    assert {k: result[k] for k in official} == pytest.approx(official, abs=1e-12)

    # hf-longclip eval's hierarcaps task: the rows' `levels`, an encoder, the image embeddings; its default rule
    from hf_longclip.evaluation.tasks import hierarcaps_task

    lookup = {t: torch.as_tensor(e) for chain, embeds in zip(chain_texts, chain_embeds) for t, e in zip(chain, embeds)}
    lookup[""] = torch.as_tensor(root)

    def encode(batch):
        return torch.stack([lookup[t] for t in batch])

    images_of_chains = torch.as_tensor(images)[torch.as_tensor(chain_to_image)]  # one row per chain, as the loader
    task = hierarcaps_task({"levels": chain_texts}, encode, images_of_chains)
    per_chain = hc_evaluator_run(images_of_chains, chain_embeds, chain_texts, range(len(chain_texts)), root)
    assert {k: task[k] for k in per_chain} == pytest.approx(per_chain, abs=1e-12)

    # fair: precision and recall averaged over which text of each tied pair argmax returns; d_corr over every order
    # of each chain's tied radii (the code's tau with a random tie-breaker)
    fair = hierarcaps(images, text_embeds, chains, root, chain_to_image=chain_to_image, tie_rule="fair")
    choices = [{}]  # every combination of the tied pairs' outcomes, equally likely
    for original, twin in twins.items():
        choices = [*choices, *({**choice, original: twin} for choice in choices)]
    broken = [hc_evaluator_run(images, chain_embeds, chain_texts, chain_to_image, root, returned=c) for c in choices]
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    radii = np.linalg.norm(unit(chain_embeds) - unit(root), axis=-1)
    orders = list(itertools.permutations(range(4)))
    expected = {"precision": np.mean([b["precision"] for b in broken]),
                "recall": np.mean([b["recall"] for b in broken]),
                "d_corr": np.mean([np.mean([official_tau([(v, p) for v, p in zip(row, order)]) for order in orders])
                                   for row in radii])}
    assert {k: fair[k] for k in expected} == pytest.approx(expected, abs=1e-12)
    assert fair["d_corr"] < official["d_corr"] - 0.01  # every chain has a tied pair: fair counts it 0, the code +1


def test_official_evaluator_through_the_evaluate_module(isolated_modules_cache):
    images, chain_embeds, chain_texts, chain_to_image, root, _ = tied_hierarcaps_case(1)
    official = hc_evaluator_run(images, chain_embeds, chain_texts, chain_to_image, root)
    metric = metrics.load("hierarcaps", keep_in_memory=True)
    kwargs = dict(chain_embeds=chain_embeds, chain_texts=chain_texts, chain_to_image=chain_to_image,
                  image_embeds=images, root_embed=root)
    result = metric.compute(**kwargs)  # float32 features: the module stores the chains' embeddings as float32
    assert result["tie_rule"] == "first"
    assert {k: result[k] for k in official} == pytest.approx(official, abs=1e-6)
    assert metric.compute(**kwargs, tie_rule="fair")["d_corr"] < official["d_corr"] - 0.01
