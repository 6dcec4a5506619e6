"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester` of the installed transformers) for
`CASTVisionModel`, with a model tester written the way transformers' ViT tests write theirs
(tests/models/vit/test_modeling_vit.py): a tiny config and random inputs, here pixel values plus random superpixel
label maps (some ids left without pixels, i.e. padding). Skips say why; `CASTUsageTest` runs in any case."""

import unittest

import pytest
import torch
from transformers.testing_utils import require_torch, torch_device

from helpers.modeling_common import UNAVAILABLE, seed_test_inputs
from hf_longclip import CASTForImageClassification, CASTVisionConfig, CASTVisionModel

if UNAVAILABLE is None:
    from helpers.modeling_common import ConfigTester, ModelTesterMixin, floats_tensor
else:
    ModelTesterMixin = type("ModelTesterMixin", (), {})

    def floats_tensor(shape, scale=1.0):
        return torch.rand(shape, device=torch_device) * scale


class CASTModelTester:
    def __init__(self, parent, batch_size=3, image_size=32, num_segments=12, depths=(1, 1), num_clusters=(5,),
                 hidden_size=32, num_attention_heads=4, intermediate_size=37, is_training=True):
        self.parent, self.batch_size, self.image_size = parent, batch_size, image_size
        self.num_segments, self.depths, self.num_clusters = num_segments, list(depths), list(num_clusters)
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.intermediate_size, self.is_training = intermediate_size, is_training
        self.num_hidden_layers = sum(depths)
        self.seq_length = num_segments + 1  # the first stage: [CLS] and the superpixel tokens

    def get_config(self) -> CASTVisionConfig:
        return CASTVisionConfig(
            hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size, image_size=self.image_size, num_segments=self.num_segments,
            depths=self.depths, num_clusters=self.num_clusters,
        )

    def superpixels(self) -> torch.Tensor:
        """Blocks of 8x4 pixels labelled with random ids below num_segments: some ids are absent (padding)."""
        blocks = torch.randint(0, self.num_segments, (self.batch_size, self.image_size // 8, self.image_size // 4))
        return blocks.repeat_interleave(8, 1).repeat_interleave(4, 2).to(torch_device)

    def prepare_config_and_inputs(self):
        pixel_values = floats_tensor([self.batch_size, 3, self.image_size, self.image_size])
        return self.get_config(), pixel_values, self.superpixels()

    def prepare_config_and_inputs_for_common(self):
        config, pixel_values, superpixels = self.prepare_config_and_inputs()
        return config, {"pixel_values": pixel_values, "superpixels": superpixels}

    def create_and_check_model(self, config, pixel_values, superpixels):
        model = CASTVisionModel(config).to(torch_device).eval()
        with torch.no_grad():
            out = model(pixel_values, superpixels)
        batch, width = self.batch_size, self.hidden_size
        self.parent.assertEqual(out.last_hidden_state.shape, (batch, 1 + self.num_clusters[-1], width))
        self.parent.assertEqual(out.pooler_output.shape, (batch, width))
        sizes = [self.num_segments, *self.num_clusters]
        self.parent.assertEqual([t.shape for t in out.segment_tokens], [(batch, n, width) for n in sizes])
        self.parent.assertEqual([a.shape for a in out.assignments],
                                [(batch, n, k) for n, k in zip(sizes, sizes[1:])])


@pytest.mark.slow  # transformers' whole common battery: minutes of CPU per model, so outside the fast suite
@require_torch
@unittest.skipIf(UNAVAILABLE is not None, UNAVAILABLE)
class CASTVisionModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (CASTVisionModel, CASTForImageClassification)
    additional_model_inputs = ["superpixels"]
    test_resize_embeddings = False
    test_torch_exportable = False  # see CASTUsageTest.test_torch_export

    @unittest.skip(reason="transformers' test seeds each module's initialisation through its private "
                  "`PreTrainedModel._initialize_weights`, which the remote code does not call (it runs on every "
                  "release: `InitializesEveryModuleMixin`); tests/models/test_missing_weights.py checks the property")
    def test_can_init_all_missing_weights(self):
        pass

    def setUp(self):
        seed_test_inputs()
        self.model_tester = CASTModelTester(self)
        self.config_tester = ConfigTester(self, config_class=CASTVisionConfig, has_text_modality=False,
                                          hidden_size=48, num_attention_heads=6, assignment_scale=3.0,
                                          common_properties=["hidden_size", "num_attention_heads", "num_segments"])

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        """The mixin adds labels only for transformers' own heads (by class name): here for the classifier."""
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is CASTForImageClassification:
            inputs["labels"] = torch.zeros(self.model_tester.batch_size, dtype=torch.long, device=torch_device)
        return inputs

    # The base model returns no loss: transformers' training tests skip base models by name (MODEL_MAPPING_NAMES),
    # which a model registered from outside transformers is not in, so they run on the classifier alone here.
    def test_training(self):
        self.all_model_classes = (CASTForImageClassification,)
        super().test_training()

    def test_training_gradient_checkpointing(self):
        self.all_model_classes = (CASTForImageClassification,)
        super().test_training_gradient_checkpointing()

    def test_training_gradient_checkpointing_use_reentrant_false(self):
        self.all_model_classes = (CASTForImageClassification,)
        super().test_training_gradient_checkpointing_use_reentrant_false()

    def test_training_gradient_checkpointing_use_reentrant_true(self):
        self.all_model_classes = (CASTForImageClassification,)
        super().test_training_gradient_checkpointing_use_reentrant_true()

    def test_config(self):
        self.config_tester.create_and_test_config_to_json_string()
        self.config_tester.create_and_test_config_to_json_file()
        self.config_tester.create_and_test_config_from_and_save_pretrained()
        self.config_tester.create_and_test_config_from_and_save_pretrained_subfolder()
        self.config_tester.create_and_test_config_with_num_labels()
        self.config_tester.check_config_can_be_init_without_params()

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    @unittest.skip(reason="CAST has no input embeddings to swap: its input is pixels and superpixels (as ViT's "
                          "tests skip it: 'ViT does not use inputs_embeds')")
    def test_inputs_embeds(self):
        pass

    @unittest.skip(reason="CAST has no token embedding matrix to get or set (the stem is convolutional)")
    def test_model_get_set_embeddings(self):
        pass


class CASTUsageTest(unittest.TestCase):
    """The model as a user calls it: tuple outputs, torch.compile without graph breaks, torch.export."""

    def setUp(self):
        seed_test_inputs()
        tester = CASTModelTester(self)
        config, self.inputs = tester.prepare_config_and_inputs_for_common()
        self.model = CASTVisionModel(config).to(torch_device).eval()
        with torch.no_grad():
            self.expected = self.model(**self.inputs)

    def test_return_dict_false(self):
        with torch.no_grad():
            as_tuple = self.model(**self.inputs, return_dict=False)
        self.assertIsInstance(as_tuple, tuple)
        torch.testing.assert_close(as_tuple[1], self.expected.pooler_output)

    def test_torch_compile_fullgraph(self):
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(self.model, fullgraph=True, backend="eager")(**self.inputs)
        torch.testing.assert_close(out.pooler_output, self.expected.pooler_output)

    def test_torch_export(self):
        with torch.no_grad():
            program = torch.export.export(self.model, args=(), kwargs=self.inputs)
            out = program.module()(**self.inputs)
        torch.testing.assert_close(out.pooler_output, self.expected.pooler_output)
