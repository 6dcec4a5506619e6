"""The short-caption base that train_fcast's variants start from: `FCASTPretrainingTask` is the whole level's
sigmoid loss (Eq. 8, checked against the model's own `forward(return_loss=True)`), and `start_from_base` gives a
variant the base's towers (the hierarchical stage 1 from the flat encoder's first layers) and nothing else. Also
the grounding scores on hand-made maps: pointing game, mass in the box and how much the maps differ between
sentences."""

from types import SimpleNamespace

import pytest
import torch

from helpers.fcast import CAPTIONS, random_images, tiny_config, tiny_fcast, tiny_processor
from hf_longclip import FCASTModel
from hf_longclip.recipes.fcast.evaluation import grounding_scores
from hf_longclip.recipes.fcast.task import FCASTPretrainingTask, start_from_base


def test_pretraining_task_is_the_whole_level_sigmoid_loss_and_freezes_the_rest():
    base = tiny_fcast(seed=1, row="flair-cast")
    task = FCASTPretrainingTask(base, None)
    batch = dict(tiny_processor(num_chunks=1)(text=CAPTIONS, images=random_images(len(CAPTIONS))))
    loss = task.compute_loss(base, batch)["whole_loss"]
    torch.testing.assert_close(loss, base(**batch, return_loss=True).loss)
    frozen = {name for name, param in base.named_parameters() if not param.requires_grad}
    assert frozen == {name for name, _ in base.named_parameters()
                      if name.startswith(("grounding_pool.", "part_logit_"))}
    with pytest.raises(ValueError, match="flat text encoder"):
        FCASTPretrainingTask(tiny_fcast(row="fcast"), None)


def test_a_variant_takes_the_towers_of_its_base_and_keeps_its_own_new_parts(caplog):
    config = tiny_config("flair-cast")
    config.text_config.num_hidden_layers = 3  # the flat encoder: stage 1's 2 layers + stage 2's 1, in one stack
    torch.manual_seed(1)
    base = FCASTModel(config)
    model = tiny_fcast(seed=2, row="fcast")  # hierarchical: stage 1 of 2 layers, stage 2, adapter, pooling
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with caplog.at_level("INFO", logger="hf_longclip.recipes.fcast.task"):
        left = start_from_base(model, base)
    assert {name.split(".")[0] for name in left} == {"grounding_pool", "part_logit_scale", "part_logit_bias",
                                                     "text_stage2", "text_adapter"}
    assert ("at their initialisation (`_init_weights`): grounding_pool, part_logit_bias, part_logit_scale, "
            "text_adapter, text_stage2") in caplog.text
    given = base.state_dict()
    for name, value in model.state_dict().items():
        if name in left:
            assert torch.equal(value, before[name]), name
        else:
            assert torch.equal(value, given[name]), name
    assert "text_model.encoder.layers.2.mlp.fc1.weight" in given and not any(".layers.2." in n for n in before)
    inputs = tiny_processor()(text=CAPTIONS[:2], images=random_images(2))
    with torch.no_grad():
        torch.testing.assert_close(
            model.get_image_features(inputs["pixel_values"], inputs["superpixels"]).pooler_output,
            base.get_image_features(inputs["pixel_values"], inputs["superpixels"]).pooler_output)


class _Inputs(dict):
    def to(self, device):
        return self


class _Maps:
    """A stand-in for `FCASTModel` whose grounding maps are given (one per object sentence), and its processor."""

    device = "cpu"

    def __init__(self, maps: torch.Tensor):
        self.maps = maps

    def eval(self):
        return self

    def __call__(self, text, images, padding):  # the processor
        return _Inputs(pixel_values=torch.zeros(1, 3, 4, 4), superpixels=None, input_ids=None, attention_mask=None)

    def get_grounding(self, *inputs):
        return SimpleNamespace(pixel_attention=self.maps[None])


@pytest.mark.parametrize("conditional, expected", [
    # the same uniform map for both sentences: the peak is every pixel, half of them in each box
    (False, {"pointing_game": 50.0, "box_mass": 50.0, "map_difference": 0.0}),
    # each sentence's map uniform over its own box: disjoint maps
    (True, {"pointing_game": 100.0, "box_mass": 100.0, "map_difference": 100.0}),
])
def test_grounding_scores_and_how_much_the_maps_differ_between_sentences(conditional, expected):
    left = torch.zeros(4, 4)
    left[:, :2] = 1 / 8
    maps = torch.stack([left, left.flip(-1)]) if conditional else torch.full((2, 4, 4), 1 / 16)
    row = {"sentences": ["Two shapes.", "A red circle.", "A blue square."], "image": None,
           "boxes": [[0.0, 0.0, 0.5, 1.0], [0.5, 0.0, 1.0, 1.0]]}  # the left and right halves
    stub = _Maps(maps)
    scores = grounding_scores(stub, stub, [row])
    assert scores == pytest.approx({**expected, "uniform_box_mass": 50.0, "box_map_difference": 100.0,
                                    "num_sentences": 2})
