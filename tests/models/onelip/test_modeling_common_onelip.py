"""transformers' common model tests and the usage tests (tests/helpers/modeling_common.py) for `OneLIPModel`, whose
training task (`OneLIPTask`, training `OneLIPForPreTraining`: the model and TRIM-Refine's queries) distils from a
frozen base text encoder (the teacher)."""

import unittest

import pytest
import torch
from transformers import CLIPTextModel
from transformers.testing_utils import require_torch, torch_device

from helpers.modeling_common import (
    UNAVAILABLE,
    DualEncoderCommonTests,
    DualEncoderUsageTests,
)
from hf_longclip import OneLIPConfig, OneLIPForPreTraining, OneLIPModel
from hf_longclip.models.onelip import OneLIPTextConfig
from hf_longclip.recipes.onelip.task import OneLIPTask


@pytest.mark.slow  # transformers' whole common battery: minutes of CPU per model, so outside the fast suite
@require_torch
@unittest.skipIf(UNAVAILABLE is not None, UNAVAILABLE)
class OneLIPModelTest(DualEncoderCommonTests, unittest.TestCase):
    all_model_classes = (OneLIPModel,)
    config_class = OneLIPConfig
    loss_terms = ("coarse_loss", "token_loss", "contrastive_loss")
    task_options = dict(trim_alpha=0.3, trim_top_k=5, trim_rank=2, weights=(0.2, 0.4, 0.7), weight_switch_step=10)
    text_config_class = OneLIPTextConfig  # RoPE, no position table

    def make_task(self, model):
        """The task trains `OneLIPForPreTraining` (the model and TRIM-Refine's queries) built from `model`'s weights;
        the teacher: a CLIP text tower of the common tester's width (its last hidden states on the first min(7, 77)
        tokens are what OneLIP distils)."""
        text = model.config.text_config
        teacher = CLIPTextModel(self.model_tester.text_model_tester.get_config()).to(model.device)
        assert teacher.config.hidden_size == text.hidden_size
        if isinstance(model, OneLIPModel):
            pretraining = OneLIPForPreTraining(model.config).to(model.device)
            pretraining.onelip = model
            model = pretraining
        return OneLIPTask(model, None, teacher=teacher, **self.task_options)

    def test_task_loss_reaches_every_parameter_under_gradient_checkpointing(self):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        inputs.pop("return_loss")
        torch.manual_seed(0)
        model = OneLIPForPreTraining(config).to(torch_device).train()
        task = self.make_task(model)
        model.activation_checkpointing_enable()
        loss = sum(task.compute_loss(model, inputs).values())
        loss.backward()
        self.assertTrue(torch.isfinite(loss))
        missing = [name for name, param in model.named_parameters() if param.requires_grad and param.grad is None]
        self.assertEqual(missing, [])
        self.assertGreater(model.trim_refine.queries.grad.abs().sum().item(), 0)


class OneLIPUsageTest(DualEncoderUsageTests, unittest.TestCase):
    model_class, config_class = OneLIPModel, OneLIPConfig
