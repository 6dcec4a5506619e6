"""`save_pretrained` (the library's one override, `modeling_common.saving.CodeBundleMixin`) has no side effect on the
model: its configuration is the same before and after saving, although transformers writes `dtype`, `architectures`
and `auto_map` into the configuration it saves; the saved `config.json` maps every Auto class that loads the
checkpoint, as `saved_auto_map()` says."""

import json

import pytest
import torch

from helpers.builders import tiny_clip, tiny_himo
from helpers.cast import tiny_classifier
from helpers.ditm import tiny_ditm
from helpers.fcast import tiny_fcast
from hf_longclip import OneLIPForPreTraining, OneLIPModel

ZERO_SHOT = "AutoModelForZeroShotImageClassification"
BUILDERS = {
    "himo_clip": (tiny_himo, {"AutoConfig": "configuration_himo_clip.HiMoCLIPConfig",
                              "AutoModel": "modeling_himo_clip.HiMoCLIPModel",
                              ZERO_SHOT: "modeling_himo_clip.HiMoCLIPModel"}),
    "ditm": (tiny_ditm, {"AutoConfig": "configuration_ditm.DITMConfig", "AutoModel": "modeling_ditm.DITMModel",
                         ZERO_SHOT: "modeling_ditm.DITMModel"}),
    "onelip": (lambda: OneLIPModel.from_clip(tiny_clip()), {
        "AutoConfig": "configuration_onelip.OneLIPConfig", "AutoModel": "modeling_onelip.OneLIPModel",
        ZERO_SHOT: "modeling_onelip.OneLIPModel"}),
    "onelip_pretraining": (lambda: OneLIPForPreTraining.from_clip(tiny_clip()), {
        "AutoConfig": "configuration_onelip.OneLIPConfig", "AutoModel": "modeling_onelip.OneLIPModel",
        "AutoModelForPreTraining": "modeling_onelip.OneLIPForPreTraining",
        ZERO_SHOT: "modeling_onelip.OneLIPModel"}),
    "cast_classifier": (tiny_classifier, {
        "AutoConfig": "configuration_cast.CASTVisionConfig", "AutoModel": "modeling_cast.CASTVisionModel",
        "AutoModelForImageClassification": "modeling_cast.CASTForImageClassification"}),
    "fcast": (tiny_fcast, {"AutoConfig": "configuration_fcast.FCASTConfig", "AutoModel": "modeling_fcast.FCASTModel",
                           ZERO_SHOT: "modeling_fcast.FCASTModel"}),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_saving_leaves_the_config_as_it_was_and_maps_every_auto_class(name, tmp_path):
    build, expected = BUILDERS[name]
    torch.manual_seed(0)
    model = build()
    before = model.config.to_dict()
    assert "auto_map" not in before and model.config.architectures is None
    model.save_pretrained(tmp_path)
    assert model.config.to_dict() == before
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"] == expected == {**model.saved_auto_map(), "AutoConfig": expected["AutoConfig"]}
    assert saved["architectures"] == [type(model).__name__]
    model.save_pretrained(tmp_path / "again")  # the same files again: nothing of the first save stayed behind
    assert (tmp_path / "again" / "config.json").read_text() == (tmp_path / "config.json").read_text()
