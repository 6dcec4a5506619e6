"""COLA multi-object accuracy: the criterion of ColaMultiObjAcc (github.com/arijitray1993/COLA, scripts/eval.py)."""

import numpy as np
import pytest

from hf_longclip.metrics import cola_multi

# scores[image][caption]
BOTH_RIGHT = [[0.3, 0.2], [0.1, 0.4]]  # every direction right
ONLY_TEXT_TO_IMAGE = [[0.3, 0.35], [0.1, 0.4]]  # captions pick their images; image 0 prefers caption 1
ONLY_IMAGE_TO_TEXT = [[0.3, 0.2], [0.35, 0.4]]  # images pick their captions; caption 0 prefers image 1
TIE = [[0.3, 0.3], [0.3, 0.4]]  # caption 0 scores 0.3 with both images, image 0 0.3 with both captions


def official(preds) -> bool:
    """ColaMultiObjAcc of the COLA repository, on a 2 x 2 array [image][caption]."""
    return preds[0, 0] > preds[1, 0] and preds[1, 1] > preds[0, 1]


@pytest.mark.parametrize(
    "direction, expected, tie",
    [("text_to_image", [1, 1, 0], 0.5), ("image_to_text", [1, 0, 1], 0.5), ("group", [1, 0, 0], 0.25)],
)
def test_each_direction_by_hand(direction, expected, tie):
    # TIE: one comparison of each direction ties, the other is right; group: two ties (1/2 x 1/2 under fair). The
    # tied comparisons are caption 0's and image 0's, whose own candidate has index 0: won under "first"
    for rule, tie_credit in (("fair", tie), ("optimistic", 1.0), ("pessimistic", 0.0), ("first", 1.0),
                             ("last", 0.0)):
        for scores, correct in zip([BOTH_RIGHT, ONLY_TEXT_TO_IMAGE, ONLY_IMAGE_TO_TEXT, TIE], [*expected, tie_credit]):
            assert cola_multi([scores], direction=direction, tie_rule=rule) == {
                "accuracy": 100.0 * correct, "num_samples": 1, "tie_rule": rule}
    # the default is ColaMultiObjAcc's strict `>`: a tie is wrong
    result = cola_multi([BOTH_RIGHT, ONLY_TEXT_TO_IMAGE, ONLY_IMAGE_TO_TEXT, TIE], direction=direction)
    assert result == {"accuracy": 25.0 * sum(expected), "num_samples": 4, "tie_rule": "pessimistic"}


def test_pessimistic_is_the_official_criterion_and_fair_the_expectation():
    # the repository's own dummy prediction, [[0.1, 0.9], [0.9, 0.1]], is wrong
    assert cola_multi([[[0.1, 0.9], [0.9, 0.1]]])["accuracy"] == 0.0
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, (500, 2, 2)).astype(float)  # small integers: many ties
    expected = 100.0 * np.mean([official(s) for s in scores])
    assert cola_multi(scores, tie_rule="pessimistic")["accuracy"] == pytest.approx(expected)
    assert cola_multi(scores) == cola_multi(scores, tie_rule="pessimistic")  # the default: the official numbers
    assert 0 < expected < 100
    # fair = the mean over every way of breaking the ties: each caption's comparison won on a coin toss
    coin = rng.integers(0, 2, (20_000, 500, 2)).astype(bool)
    own = np.stack([scores[:, 0, 0], scores[:, 1, 1]], axis=1)
    other = np.stack([scores[:, 1, 0], scores[:, 0, 1]], axis=1)
    won = (own > other) | ((own == other) & coin)
    assert cola_multi(scores, tie_rule="fair")["accuracy"] == pytest.approx(100.0 * won.all(axis=2).mean(), abs=0.3)


@pytest.mark.parametrize(
    "scores, kwargs, message",
    [
        (np.zeros((0, 2, 2)), {}, "scores is empty"),
        (np.zeros((3, 2, 3)), {}, r"must have shape \(N, 2, 2\) = \[pair\]\[image\]\[caption\], got \(3, 2, 3\)"),
        (np.zeros((2, 2)), {}, r"scores must have shape \(N, 2, 2\)"),
        ([[[0.1, 0.2], [0.3]]], {}, "scores must be a numeric array of shape"),
        ([[[0.1, np.nan], [0.3, 0.4]]], {}, "scores contains NaN or inf"),
        ([BOTH_RIGHT], {"direction": "both"}, "unknown direction 'both'"),
    ],
)
def test_bad_inputs_raise(scores, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cola_multi(scores, **kwargs)
