"""transformers' common model tests and the usage tests (tests/test_modeling_common.py) for `OneLIPModel`, whose
training forward also takes the frozen base encoder's token states."""

import unittest

import torch
from test_modeling_common import UNAVAILABLE, DualEncoderCommonTests, DualEncoderUsageTests
from transformers.testing_utils import require_torch, torch_device

from hf_longclip import OneLIPConfig, OneLIPModel
from hf_longclip.models.onelip import OneLIPTextConfig

TEXT_LENGTH, TEXT_WIDTH = 7, 32  # the common tester's text inputs


def teacher_inputs(batch_size: int) -> dict:
    """The base encoder's last hidden states on the first min(7, 77) tokens."""
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(batch_size, TEXT_LENGTH, TEXT_WIDTH, generator=generator)
    return {"teacher_hidden_states": states.to(torch_device)}


@require_torch
@unittest.skipIf(UNAVAILABLE is not None, UNAVAILABLE)
class OneLIPModelTest(DualEncoderCommonTests, unittest.TestCase):
    all_model_classes = (OneLIPModel,)
    config_class = OneLIPConfig
    loss_terms = ("coarse_loss", "token_loss", "contrastive_loss")
    config_overrides = dict(trim_alpha=0.3, trim_top_k=5, trim_rank=2, token_weight=0.4, weight_switch_step=10)
    extra_inputs = staticmethod(teacher_inputs)
    text_config_class = OneLIPTextConfig  # RoPE, no position table


class OneLIPUsageTest(DualEncoderUsageTests, unittest.TestCase):
    model_class, config_class = OneLIPModel, OneLIPConfig
