"""The long-caption evaluation several models' miniature protocols share (`hf_longclip.evaluation.long_captions`)."""

import pytest
import torch

from hf_longclip.evaluation import recall_at_1_both_ways


@pytest.mark.parametrize("tie_rule, i2t", [("fair", 50.0), ("optimistic", 100.0), ("pessimistic", 0.0)])
def test_recall_at_1_both_ways_credits_ties_by_the_rule(tie_rule, i2t):
    images = torch.eye(2)
    captions = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # two captions read alike: each image ties them
    # text to image: both captions rank image 0 first, a hit for caption 0 only, whatever the rule
    assert recall_at_1_both_ways(images, captions, tie_rule) == {"r1_i2t": i2t, "r1_t2i": 50.0}
    assert recall_at_1_both_ways(images, images) == {"r1_i2t": 100.0, "r1_t2i": 100.0}
