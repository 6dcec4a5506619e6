"""transformers' common model tests and the usage tests (tests/test_modeling_common.py) for `DITMModel`, whose
training forward also takes each text's descriptiveness and image id."""

import unittest

import torch
from test_modeling_common import UNAVAILABLE, DualEncoderCommonTests, DualEncoderUsageTests
from transformers.testing_utils import require_torch, torch_device

from hf_longclip import DITMConfig, DITMModel


def ditm_inputs(batch_size: int) -> dict:
    """Two texts per image id and descriptiveness in [0, 1]."""
    return {"descriptiveness": torch.linspace(0.1, 1.0, batch_size, device=torch_device),
            "image_ids": torch.arange(batch_size, device=torch_device) // 2}


@require_torch
@unittest.skipIf(UNAVAILABLE is not None, UNAVAILABLE)
class DITMModelTest(DualEncoderCommonTests, unittest.TestCase):
    all_model_classes = (DITMModel,)
    config_class = DITMConfig
    # transformers' batching test runs the training inputs one row at a time, where no image has two texts: the
    # ordering term (tests/test_ditm_model.py) is off here.
    config_kwargs = dict(order_weight=0.0)
    loss_terms = ("triplet_loss",)
    config_overrides = dict(margin_scale=4.0, order_weight=0.5, gpo_pe_dim=16, gpo_hidden_dim=8, gpo_temperature=0.2)
    extra_inputs = staticmethod(ditm_inputs)


class DITMUsageTest(DualEncoderUsageTests, unittest.TestCase):
    model_class, config_class = DITMModel, DITMConfig

    def test_torch_compile_fullgraph(self):
        """GPO's GRU needs dynamo's (experimental) RNN support: `torch._dynamo.config.allow_rnn = True`."""
        with torch._dynamo.config.patch(allow_rnn=True):
            super().test_torch_compile_fullgraph()
