"""transformers' common model tests and the usage tests (tests/helpers/modeling_common.py) for `DITMModel`, whose
training task (`DITMTask`) also takes each text's descriptiveness, image id and image row."""

import unittest

import pytest
import torch
from transformers.testing_utils import require_torch, torch_device

from helpers.modeling_common import (
    UNAVAILABLE,
    DualEncoderCommonTests,
    DualEncoderUsageTests,
)
from hf_longclip import DITMConfig, DITMModel
from hf_longclip.recipes.ditm.task import DITMTask


def ditm_inputs(batch_size: int) -> dict:
    """Two texts per image id, descriptiveness in [0, 1], text i describing image row i."""
    return {"descriptiveness": torch.linspace(0.1, 1.0, batch_size, device=torch_device),
            "image_ids": torch.arange(batch_size, device=torch_device) // 2,
            "text_image_index": torch.arange(batch_size, device=torch_device)}


@pytest.mark.slow  # transformers' whole common battery: minutes of CPU per model, so outside the fast suite
@require_torch
@unittest.skipIf(UNAVAILABLE is not None, UNAVAILABLE)
class DITMModelTest(DualEncoderCommonTests, unittest.TestCase):
    all_model_classes = (DITMModel,)
    config_class = DITMConfig
    # Two texts per image id: the ordering term (tests/models/ditm/test_modeling_ditm.py) is on with lambda > 0.
    loss_terms = ("triplet_loss", "order_loss")
    config_overrides = dict(gpo_pe_dim=16, gpo_hidden_dim=8, gpo_temperature=0.2)
    task_options = dict(margin_scale=4.0, order_weight=0.5)

    def make_task(self, model):
        return DITMTask(model, None, **self.task_options)

    def task_inputs(self, batch_size: int) -> dict:
        return ditm_inputs(batch_size)


class DITMUsageTest(DualEncoderUsageTests, unittest.TestCase):
    model_class, config_class = DITMModel, DITMConfig

    def test_torch_compile_fullgraph(self):
        """GPO's GRU needs dynamo's (experimental) RNN support: `torch._dynamo.config.allow_rnn = True`."""
        with torch._dynamo.config.patch(allow_rnn=True):
            super().test_torch_compile_fullgraph()
