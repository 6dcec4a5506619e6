"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester` of the installed transformers, fetched by
transformers_common.py) for our dual-encoder models: `DualEncoderCommonTests` with a model tester written the way
transformers' CLIP tests write theirs (tests/models/clip/test_modeling_clip.py: text and vision sub-testers, a tiny
config and random inputs), and `DualEncoderUsageTests`, the model as a user calls it (`return_dict`,
`torch.export`, `torch.compile(fullgraph=True)`, the clear error for a text without its end-of-text token).
`tests/models/<arch>/test_modeling_common_<arch>.py` subclass them. Where the common tests cannot be fetched,
`UNAVAILABLE` says why (subclasses skip with it) and the stand-ins below keep the testers working for the usage tests.

Inputs differ from CLIP's tester in one respect: every text carries the end-of-text token (a small id, as in
real checkpoints, not CLIP's legacy `eos_token_id=2`) at its last attended position, as the processor makes them.
"""

import copy
import json
import tempfile
import unittest

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import CLIPTextConfig, CLIPVisionConfig
from transformers.testing_utils import torch_device

from hf_longclip.training.task import save_options, saved_options

from .transformers_common import UNAVAILABLE_PREFIX, CommonTestsUnavailable, common_tests

try:
    modeling_common, configuration_common = common_tests()
    UNAVAILABLE = None
    ModelTesterMixin = modeling_common.ModelTesterMixin
    ConfigTester = configuration_common.ConfigTester
    floats_tensor = modeling_common.floats_tensor
    ids_tensor = modeling_common.ids_tensor
    random_attention_mask = modeling_common.random_attention_mask
except CommonTestsUnavailable as error:
    UNAVAILABLE = f"{UNAVAILABLE_PREFIX}: {error}"
    ModelTesterMixin, ConfigTester = type("ModelTesterMixin", (), {}), None

    # What transformers' helpers draw, for the tester that the usage tests still use.
    def floats_tensor(shape, scale=1.0):
        return torch.rand(shape, device=torch_device) * scale

    def ids_tensor(shape, vocab_size):
        return torch.randint(0, vocab_size, shape, device=torch_device)

    def random_attention_mask(shape):
        mask = ids_tensor(shape, 2)
        mask[:, 0] = 1
        return mask


def seed_test_inputs(seed: int = 0) -> None:
    """Make a test's random config and inputs independent of the tests that ran before it (transformers' helpers
    draw from their module's own `global_rng`, which otherwise carries over from test to test)."""
    torch.manual_seed(seed)
    if UNAVAILABLE is None:
        modeling_common.global_rng.seed(seed)


class DualEncoderTextModelTester:
    def __init__(
        self,
        parent,
        batch_size=12,
        seq_length=7,
        is_training=True,
        use_input_mask=True,
        vocab_size=99,
        hidden_size=32,
        projection_dim=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        dropout=0.1,
        attention_dropout=0.1,
        max_position_embeddings=16,
        initializer_range=0.02,
        eos_token_id=98,
        scope=None,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_input_mask = use_input_mask
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.projection_dim = projection_dim
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.eos_token_id = eos_token_id
        self.scope = scope

    def prepare_config_and_inputs(self):
        # Token ids below eos_token_id; each text then ends with the end-of-text token at its last attended position.
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.eos_token_id)
        lengths = np.full(self.batch_size, self.seq_length)
        input_mask = None
        if self.use_input_mask:
            input_mask = random_attention_mask([self.batch_size, self.seq_length])
            lengths = np.random.randint(1, self.seq_length - 1, size=(self.batch_size,))
            for batch_idx, start_index in enumerate(lengths):
                input_mask[batch_idx, :start_index] = 1
                input_mask[batch_idx, start_index:] = 0
        for batch_idx, length in enumerate(lengths):
            input_ids[batch_idx, length - 1] = self.eos_token_id
        config = self.get_config()
        return config, input_ids, input_mask

    def get_config(self):
        return CLIPTextConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            projection_dim=self.projection_dim,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            max_position_embeddings=self.max_position_embeddings,
            initializer_range=self.initializer_range,
            bos_token_id=0,
            pad_token_id=1,
            eos_token_id=self.eos_token_id,
        )

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, input_mask = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "attention_mask": input_mask}


class DualEncoderVisionModelTester:
    def __init__(
        self,
        parent,
        batch_size=12,
        image_size=16,
        patch_size=4,
        num_channels=3,
        is_training=True,
        hidden_size=32,
        projection_dim=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        dropout=0.1,
        attention_dropout=0.1,
        initializer_range=0.02,
        scope=None,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.is_training = is_training
        self.hidden_size = hidden_size
        self.projection_dim = projection_dim
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.initializer_range = initializer_range
        self.scope = scope
        # in ViT, the seq length equals the number of patches + 1 (we add 1 for the [CLS] token)
        self.seq_length = (image_size // patch_size) ** 2 + 1

    def prepare_config_and_inputs(self):
        pixel_values = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        return self.get_config(), pixel_values

    def get_config(self):
        return CLIPVisionConfig(
            image_size=self.image_size,
            patch_size=self.patch_size,
            num_channels=self.num_channels,
            hidden_size=self.hidden_size,
            projection_dim=self.projection_dim,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            initializer_range=self.initializer_range,
        )

    def prepare_config_and_inputs_for_common(self):
        config, pixel_values = self.prepare_config_and_inputs()
        return config, {"pixel_values": pixel_values}


class DualEncoderModelTester:
    """Config and inputs of a dual-encoder model: `config_class(text_config, vision_config, projection_dim,
    **config_kwargs)`. The model's training objective is its task's: `parent.make_task(model)` builds it and
    `parent.task_inputs(batch_size)` gives the fields its batches carry beyond the model's inputs (e.g. DITM's image
    ids and descriptiveness); neither is an input of the model, so the common tests never see them."""

    def __init__(self, parent, config_class, model_class, config_kwargs=None, text_kwargs=None, vision_kwargs=None,
                 is_training=True):
        self.parent = parent
        self.config_class, self.model_class = config_class, model_class
        self.config_kwargs = config_kwargs or {}
        self.text_model_tester = DualEncoderTextModelTester(parent, **(text_kwargs or {}))
        self.vision_model_tester = DualEncoderVisionModelTester(parent, **(vision_kwargs or {}))
        self.batch_size = self.text_model_tester.batch_size  # need bs for batching_equivalence test
        self.is_training = is_training

    def prepare_config_and_inputs(self):
        _, input_ids, attention_mask = self.text_model_tester.prepare_config_and_inputs()
        _, pixel_values = self.vision_model_tester.prepare_config_and_inputs()
        return self.get_config(), input_ids, attention_mask, pixel_values

    def get_config(self):
        return self.config_class(
            text_config=self.text_model_tester.get_config().to_dict(),
            vision_config=self.vision_model_tester.get_config().to_dict(),
            projection_dim=64,
            **self.config_kwargs,
        )

    def create_and_check_model(self, config, input_ids, attention_mask, pixel_values):
        model = self.model_class(config).to(torch_device).eval()
        with torch.no_grad():
            result = model(input_ids, pixel_values, attention_mask)
        self.parent.assertEqual(
            result.logits_per_image.shape, (self.vision_model_tester.batch_size, self.text_model_tester.batch_size)
        )
        self.parent.assertEqual(
            result.logits_per_text.shape, (self.text_model_tester.batch_size, self.vision_model_tester.batch_size)
        )

    def create_and_check_model_with_loss(self, config, input_ids, attention_mask, pixel_values):
        model = self.model_class(config).to(torch_device).train()
        result = model(input_ids, pixel_values, attention_mask, return_loss=True)
        # The model's own loss: CLIP's symmetric InfoNCE over the local batch, text i matching image i.
        labels = torch.arange(input_ids.shape[0], device=torch_device)
        expected = (F.cross_entropy(result.logits_per_text, labels)
                    + F.cross_entropy(result.logits_per_image, labels)) / 2
        self.parent.assertEqual(result.loss.shape, ())
        self.parent.assertTrue(torch.isfinite(result.loss))
        torch.testing.assert_close(result.loss, expected)
        torch.testing.assert_close(result.logit_scale, model.logit_scale.exp())
        result.loss.backward()
        self.parent.assertTrue(all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None))
        # The training objective: the model's task over the model's inputs and the task's own fields.
        model.zero_grad()
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "pixel_values": pixel_values,
                 **self.parent.task_inputs(input_ids.shape[0])}
        task = self.parent.make_task(model)  # its model: `model`, or a pre-training model around it (OneLIP)
        terms = task.compute_loss(task.model, batch)
        self.parent.assertEqual(set(terms), set(self.parent.loss_terms))
        loss = sum(terms.values())
        self.parent.assertEqual(loss.shape, ())
        self.parent.assertTrue(torch.isfinite(loss))
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        self.parent.assertTrue(grads and all(torch.isfinite(grad).all() for grad in grads))

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, attention_mask, pixel_values = self.prepare_config_and_inputs()
        inputs_dict = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "pixel_values": pixel_values,
            "return_loss": True,
        }
        return config, inputs_dict


class DualEncoderCommonTests(ModelTesterMixin):
    """transformers' common model tests for one dual-encoder model. A subclass (also a `unittest.TestCase`) sets
    `all_model_classes = (Model,)`, `config_class`, `config_overrides` (the model's own configuration options,
    checked to round-trip by `ConfigTester`), `text_config_class` where its text configuration is not CLIP's,
    `config_kwargs` where needed, and its training task: `make_task(model)` (the model's task with `task_options`),
    `task_options` (non-default options of the task, checked in its `options()` and saved beside a checkpoint),
    `loss_terms` (the names the task's `compute_loss` returns) and, where its batches carry more than the model's
    inputs, `task_inputs(batch_size)`."""

    additional_model_inputs = ["pixel_values"]
    test_resize_embeddings = False
    _is_composite = True
    config_class = None
    text_config_class = CLIPTextConfig
    loss_terms = ()
    config_overrides = {}
    config_kwargs = {}
    task_options = {}

    def make_task(self, model):
        raise NotImplementedError

    def task_inputs(self, batch_size: int) -> dict:
        return {}

    def setUp(self):
        seed_test_inputs()
        self.model_tester = DualEncoderModelTester(self, self.config_class, self.all_model_classes[0],
                                                   self.config_kwargs)
        self.config_tester = ConfigTester(
            self,
            config_class=self.config_class,
            has_text_modality=False,
            common_properties=["projection_dim", "logit_scale_init_value", *self.config_overrides],
            **self.config_overrides,
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_model(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs()
        self.model_tester.create_and_check_model(*config_and_inputs)

    def test_model_with_loss(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs()
        self.model_tester.create_and_check_model_with_loss(*config_and_inputs)

    def test_task_options_saved_beside_the_checkpoint(self):
        """The task's options (not the configuration) are what a trained checkpoint records: `save_options` writes
        them beside it and `saved_options` reads them back from the loaded model."""
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        model = self.model_tester.model_class(config)
        task = self.make_task(model)
        options = task.options()
        self.assertEqual({key: options[key] for key in self.task_options}, self.task_options)
        for name in options:
            self.assertFalse(hasattr(config, name), name)
        with tempfile.TemporaryDirectory() as tmp_dir_name:
            model.save_pretrained(tmp_dir_name)
            self.assertEqual(saved_options(self.model_tester.model_class.from_pretrained(tmp_dir_name)), {})
            save_options(task, tmp_dir_name)
            reloaded = self.model_tester.model_class.from_pretrained(tmp_dir_name)
            self.assertEqual(saved_options(reloaded), json.loads(json.dumps(options)))

    # The skips below are transformers' CLIPModelTest's, with its reasons (tests/models/clip/test_modeling_clip.py; the
    # sdist does not ship tests/models/, so they were read from transformers' repository).
    @unittest.skip(reason="Hidden_states is tested in individual model tests")
    def test_hidden_states_output(self):
        pass

    @unittest.skip(reason="Inputs_embeds is tested in individual model tests")
    def test_inputs_embeds(self):
        pass

    # CLIPModelTest sets `test_attention_outputs = False`, which removes the mixin's test of that name.
    @unittest.skip(
        reason="Attentions are tested in individual model tests (CLIPModelTest: test_attention_outputs=False)"
    )
    def test_attention_outputs(self):
        pass

    @unittest.skip(reason="Retain_grad is tested in individual model tests")
    def test_retain_grad_hidden_states_attentions(self):
        pass

    @unittest.skip(reason="CLIPModel does not have input/output embeddings")
    def test_model_get_set_embeddings(self):
        pass

    @unittest.skip(reason="transformers' test seeds each module's initialisation through its private "
                  "`PreTrainedModel._initialize_weights`, which the remote code does not call (it runs on every "
                  "release: `InitializesEveryModuleMixin`); tests/models/test_missing_weights.py checks the property")
    def test_can_init_all_missing_weights(self):
        pass

    def test_load_vision_text_config(self):
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        # Save the model's config and check that CLIPVisionConfig and its text config class load from it
        with tempfile.TemporaryDirectory() as tmp_dir_name:
            config.save_pretrained(tmp_dir_name)
            vision_config = CLIPVisionConfig.from_pretrained(tmp_dir_name)
            self.assertDictEqual(config.vision_config.to_dict(), vision_config.to_dict())
            text_config = self.text_config_class.from_pretrained(tmp_dir_name)
            self.assertDictEqual(config.text_config.to_dict(), text_config.to_dict())


class DualEncoderUsageTests:
    """The model as a user calls it: tuple outputs, torch.export, torch.compile without graph breaks, loading. A
    subclass (also a `unittest.TestCase`) sets `model_class`, `config_class` and, if needed, `config_kwargs`."""

    model_class = config_class = None
    config_kwargs = {}

    def setUp(self):
        seed_test_inputs()
        tester = DualEncoderModelTester(self, self.config_class, self.model_class, self.config_kwargs,
                                        text_kwargs=dict(batch_size=3), vision_kwargs=dict(batch_size=3))
        config, self.inputs = tester.prepare_config_and_inputs_for_common()
        self.inputs.pop("return_loss")
        torch.manual_seed(0)
        self.model = self.model_class(config).to(torch_device).eval()

    def assert_matches_eager(self, logits_per_image, text_embeds, image_embeds):
        with torch.no_grad():
            expected = self.model(**self.inputs)
        torch.testing.assert_close(logits_per_image, expected.logits_per_image)
        torch.testing.assert_close(text_embeds, expected.text_embeds)
        torch.testing.assert_close(image_embeds, expected.image_embeds)

    def test_return_dict_false_and_true(self):
        with torch.no_grad():
            as_tuple = self.model(**self.inputs, return_dict=False)
            as_output = self.model(**self.inputs, return_dict=True)
        self.assertIsInstance(as_tuple, tuple)
        self.assertEqual(len(as_tuple), len(as_output.to_tuple()))
        logits_per_image, _, text_embeds, image_embeds = as_tuple[:4]
        self.assert_matches_eager(logits_per_image, text_embeds, image_embeds)
        self.assert_matches_eager(as_output.logits_per_image, as_output.text_embeds, as_output.image_embeds)
        with torch.no_grad():
            features = self.model.get_text_features(self.inputs["input_ids"], return_dict=False)
        self.assertIsInstance(features, tuple)

    def test_torch_export(self):
        with torch.no_grad():
            program = torch.export.export(self.model, args=(), kwargs=self.inputs)
            out = program.module()(**self.inputs)
        self.assert_matches_eager(out.logits_per_image, out.text_embeds, out.image_embeds)

    def test_torch_compile_fullgraph(self):
        torch._dynamo.reset()
        text_inputs = {key: self.inputs[key] for key in ("input_ids", "attention_mask")}
        with torch.no_grad():
            out = torch.compile(self.model, fullgraph=True, backend="eager")(**self.inputs)
            features = torch.compile(self.model.get_text_features, fullgraph=True, backend="eager")(**text_inputs)
            expected_features = self.model.get_text_features(**text_inputs)
        self.assert_matches_eager(out.logits_per_image, out.text_embeds, out.image_embeds)
        torch.testing.assert_close(features.pooler_output, expected_features.pooler_output)

    def test_text_without_end_of_text_token_is_a_clear_error(self):
        input_ids = self.inputs["input_ids"].clone()
        input_ids[input_ids == self.model.config.text_config.eos_token_id] = 5
        with pytest.raises(ValueError, match="end-of-text"):
            self.model.get_text_features(input_ids)
        with pytest.raises(ValueError, match="end-of-text"):
            self.model(**{**self.inputs, "input_ids": input_ids})

    def test_logit_scale_missing_from_a_checkpoint_is_initialised(self):
        config = copy.deepcopy(self.model.config)
        config.logit_scale_init_value = 3.0
        model = self.model_class.from_pretrained(None, config=config, state_dict={})
        self.assertEqual(model.logit_scale.tolist(), [3.0])
