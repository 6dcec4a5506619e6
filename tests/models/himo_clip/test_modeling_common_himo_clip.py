"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester` of the installed transformers) run
against `HiMoCLIPModel` through `DualEncoderCommonTests` (tests/helpers/modeling_common.py). The mixins come from
transformers' source distribution (see tests/helpers/transformers_common.py) and are used unchanged; where they cannot
be fetched, `HiMoCLIPModelTest` skips with the reason. Tests skipped here are the ones transformers' `CLIPModelTest`
skips, for the same reasons (HiMoCLIPModel is a CLIPModel), plus one whose reason is given beside it.
`HiMoCLIPUsageTest` runs in any case: `return_dict`, `torch.export` and `torch.compile(fullgraph=True)` on the model as
a user calls it, and the clear error for a text without its end-of-text token."""

import unittest

import pytest
from transformers.testing_utils import require_torch

from helpers.modeling_common import (
    UNAVAILABLE,
    DualEncoderCommonTests,
    DualEncoderUsageTests,
)
from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask


@pytest.mark.slow  # transformers' whole common battery: minutes of CPU per model, so outside the fast suite
@require_torch
@unittest.skipIf(UNAVAILABLE is not None, UNAVAILABLE)
class HiMoCLIPModelTest(DualEncoderCommonTests, unittest.TestCase):
    all_model_classes = (HiMoCLIPModel,)
    config_class = HiMoCLIPConfig
    loss_terms = ("global_loss", "component_loss")
    # MoLo's options are the task's (HiMoCLIPConfig has none of its own beyond CLIP's).
    task_options = dict(hide_tau=0.8, molo_lambda=0.5, hide_scope="local", label_smoothing=0.1)

    def make_task(self, model):
        return HiMoCLIPTask(model, None, **self.task_options)


class HiMoCLIPUsageTest(DualEncoderUsageTests, unittest.TestCase):
    model_class, config_class = HiMoCLIPModel, HiMoCLIPConfig
