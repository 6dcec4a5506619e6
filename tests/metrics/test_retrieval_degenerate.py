"""A collapsed model does not pass unnoticed (issue 31): retrieval warns when most embedding rows are duplicates and
reports how many queries had a tie; under the fair tie rule such a model scores chance, under the optimistic one
it would score 100."""

import warnings

import numpy as np
import pytest
import torch

from hf_longclip.metrics.install import load
from hf_longclip.metrics.retrieval import (
    DegenerateEmbeddingsWarning,
    duplicate_fraction,
    fold_retrieval,
    long_text_retrieval,
)


def test_constant_embeddings_warn_and_report_every_query_tied():
    retrieval = load("long_text_retrieval")  # the evaluate module, as users call it
    with pytest.warns(DegenerateEmbeddingsWarning, match=r"88% of image_embeds, 88% of text_embeds repeat another "
                                                         r"row.*ties_i2t = 8, ties_t2i = 8"):
        result = retrieval.compute(text_embeds=[[0.6, 0.8]] * 8, text_to_image=list(range(8)),
                                   image_embeds=[[1.0, 0.0]] * 8, ks=(1,))
    assert result["r1_i2t"] == result["r1_t2i"] == 100 / 8  # fair: chance, 1 in 8 tied candidates
    assert result["ties_i2t"] == result["ties_t2i"] == 8


def test_distinct_embeddings_give_no_warning_and_no_tie():
    rng = np.random.default_rng(0)
    images, texts = rng.standard_normal((50, 16)), rng.standard_normal((50, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateEmbeddingsWarning)
        result = long_text_retrieval(images, texts, list(range(50)))
    assert result["ties_i2t"] == result["ties_t2i"] == 0


def test_near_duplicates_count_and_a_tie_among_positives_is_no_tie():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((10, 8))
    assert duplicate_fraction(torch.tensor(base)) == 0
    near = np.concatenate([base, base[:3] * 2.0 + 1e-9])  # the same directions again, scaled and nudged
    assert duplicate_fraction(torch.tensor(near)) == pytest.approx(3 / 13)
    # image 0's two captions tie with each other and beat image 1's: no negative ties with its best positive
    with pytest.warns(DegenerateEmbeddingsWarning):  # texts 0 and 1 are the same row
        result = long_text_retrieval(np.eye(2), [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [0, 0, 1], ks=(1,))
    assert result["ties_i2t"] == 0 and result["ties_t2i"] == 0


def test_folds_sum_their_ties():
    with pytest.warns(DegenerateEmbeddingsWarning):
        result = fold_retrieval(np.ones((4, 2)), np.ones((4, 2)), [0, 1, 2, 3], num_folds=2, ks=(1,))
    assert result["ties_i2t"] == result["ties_t2i"] == 4 and result["r1_i2t"] == 50.0  # 2 tied per fold
