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
    "direction, expected",
    [("text_to_image", [True, True, False, False]), ("image_to_text", [True, False, True, False]),
     ("group", [True, False, False, False])],
)
def test_each_direction_by_hand(direction, expected):
    for scores, correct in zip([BOTH_RIGHT, ONLY_TEXT_TO_IMAGE, ONLY_IMAGE_TO_TEXT, TIE], expected):
        assert cola_multi([scores], direction=direction) == {"accuracy": 100.0 * correct, "num_samples": 1}
    result = cola_multi([BOTH_RIGHT, ONLY_TEXT_TO_IMAGE, ONLY_IMAGE_TO_TEXT, TIE], direction=direction)
    assert result == {"accuracy": 25.0 * sum(expected), "num_samples": 4}


def test_default_is_the_official_criterion():
    # the repository's own dummy prediction, [[0.1, 0.9], [0.9, 0.1]], is wrong
    assert cola_multi([[[0.1, 0.9], [0.9, 0.1]]]) == {"accuracy": 0.0, "num_samples": 1}
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, (500, 2, 2)).astype(float)  # small integers: many ties
    expected = 100.0 * np.mean([official(s) for s in scores])
    assert cola_multi(scores)["accuracy"] == pytest.approx(expected)
    assert 0 < expected < 100


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
