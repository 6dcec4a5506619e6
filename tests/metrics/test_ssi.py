"""SSI (HiMo-CLIP Eq. 22): hand-computed values, the paper's Figure 6 cases, and bad inputs."""

import itertools

import numpy as np
import pytest

from hf_longclip.metrics import ssi

# HiMo-CLIP Figure 6: one caption per case, (ori, noise) scores printed with 3 decimals and the reported SSI.
# None reproduces to 2 decimals from the printed scores (e.g. FG-CLIP case a: |0.222 - 0.189| / 0.222 = 14.86, not
# 15.08), because the scores were rounded before printing; every reported SSI lies within what scores rounding to
# the printed ones (+-0.0005) can give, which is what is checked.
FIGURE_6 = [
    ("a", "FG-CLIP", 0.222, 0.189, 15.08),
    ("a", "Long-CLIP", 0.254, 0.221, 12.97),
    ("a", "TULIP", 0.283, 0.249, 12.13),
    ("a", "Ours", 0.273, 0.260, 4.79),
    ("b", "FG-CLIP", 0.243, 0.197, 19.19),
    ("b", "Long-CLIP", 0.281, 0.226, 19.32),
    ("b", "TULIP", 0.255, 0.174, 31.71),
    ("b", "Ours", 0.254, 0.236, 7.08),
]


@pytest.mark.parametrize("case, method, ori, noise, reported", FIGURE_6)
def test_paper_figure_6_within_rounding(case, method, ori, noise, reported):
    printed = ssi([[ori]], [[noise]])["ssi"]
    assert printed == pytest.approx(abs(ori - noise) / ori * 100)
    assert printed == pytest.approx(reported, abs=0.27)  # the printed scores alone: off by up to 0.26
    corners = [ssi([[o]], [[n]])["ssi"] for o, n in itertools.product((ori - 5e-4, ori + 5e-4),
                                                                      (noise - 5e-4, noise + 5e-4))]
    # |o - n| / o is monotonic in o and in n on these boxes (n < o), so its range is spanned by the corners
    assert min(corners) <= reported <= max(corners)


def test_paper_case_studies_rank_methods_as_reported():
    for case in "ab":
        rows = [row for row in FIGURE_6 if row[0] == case]
        values = {method: ssi([[ori]], [[noise]])["ssi"] for _, method, ori, noise, _ in rows}
        assert min(values, key=values.get) == "Ours"
        assert sorted(values, key=values.get) == sorted(values, key=lambda m: next(r[4] for r in rows if r[1] == m))


def test_hand_computed_ragged():
    # sample 0: |0.5 - 0.375| / 0.5 = 25 %, 0 %  -> 12.5; sample 1: |0.5 - 0.75| / 0.5 = 50 % (increases count too)
    result = ssi([[0.5, 0.25], [0.5]], [[0.375, 0.25], [0.75]])
    assert result == {"ssi": 31.25, "num_samples": 2, "num_subtexts": 3}


def test_mean_of_per_sample_means_not_of_all_subtexts():
    # per-sample means 10 and 40 -> 25; a flat mean over the 4 subtexts would give (10 + 10 + 10 + 40) / 4 = 17.5
    result = ssi([[1.0, 1.0, 1.0], [1.0]], [[0.9, 1.1, 0.9], [0.6]])
    assert result["ssi"] == pytest.approx(25.0)
    assert result["num_subtexts"] == 4


def test_numpy_rows_and_no_change():
    assert ssi(np.full((3, 4), 0.3), np.full((3, 4), 0.3)) == {"ssi": 0.0, "num_samples": 3, "num_subtexts": 12}


@pytest.mark.parametrize(
    "original, noisy, message",
    [
        ([], [], "original_scores is empty"),
        ([[0.3]], [[0.2], [0.1]], "original_scores has 1 samples but noisy_scores has 2"),
        ([[0.3, 0.2]], [[0.2]], r"sample 0: original_scores\[0\] has 2 subtext scores but noisy_scores\[0\] has 1"),
        ([[0.3], []], [[0.3], []], r"original_scores\[1\] must be a flat, non-empty list"),
        ([[[0.3, 0.2]]], [[[0.3, 0.2]]], r"original_scores\[0\] must be a flat, non-empty list"),
        ([[0.3], [0.2, 0.0]], [[0.3], [0.2, 0.1]], r"original_scores\[1\]\[1\] = 0.0 must be > 0"),
        ([[-0.1]], [[0.1]], r"original_scores\[0\]\[0\] = -0.1 must be > 0"),
        ([[0.3]], [[float("nan")]], r"noisy_scores\[0\] contains NaN or inf"),
        ([[float("inf")]], [[0.3]], r"original_scores\[0\] contains NaN or inf"),
        ([["high"]], [[0.3]], r"original_scores\[0\] must be a flat list of numbers"),
    ],
)
def test_bad_inputs_raise(original, noisy, message):
    with pytest.raises(ValueError, match=message):
        ssi(original, noisy)
