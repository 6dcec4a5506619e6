"""Each script's variants as its method builds them (`Method.build_variant`, what examples/train_himo.py,
train_ditm.py and train_cast.py train): the variant's options over the script's, the model from scratch towers or
from a CLIP checkpoint, the same weights from the same seed."""

import pytest
import torch
from transformers import ViTForImageClassification

from helpers.builders import char_clip_tokenizer, tiny_clip, tiny_processor, tiny_sub_configs
from hf_longclip import CASTForImageClassification, DITMModel, HiMoCLIPModel, OneLIPModel
from hf_longclip.recipes.cast import image_processor
from hf_longclip.recipes.ditm import BACKBONES
from hf_longclip.recipes.himo_clip import ABLATIONS, HiMoCLIPTask
from hf_longclip.recipes.longclip import LongCLIPTask
from hf_longclip.recipes.registry import method

PARTS = (char_clip_tokenizer(), tiny_processor().image_processor)


def test_the_scripts_methods_build_their_variants():
    for name in ("himo", "ditm", "cast"):
        assert method(name).variants and method(name).build_variant is not None, name


def test_himo_variants_take_their_options_over_the_scripts():
    himo = method("himo")
    task, processor = himo.build_variant("clip-77", tiny_sub_configs(77), PARTS, preset="released", molo_lambda=2.0)
    assert processor.max_length == 77 and task.model.config.text_config.max_position_embeddings == 77
    assert task.options()["molo_lambda"] == 0.0  # the variant's
    assert task.options()["label_smoothing"] == 0.1  # the script's preset
    task, processor = himo.build_variant("himo-clip-released", tiny_sub_configs(248), PARTS, preset="paper")
    assert processor.max_length == 248 and task.options()["gather_grad"] is False
    task, _ = himo.build_variant("himo-clip", tiny_sub_configs(248), PARTS, molo_lambda=2.0,
                                 **ABLATIONS["table5"]["L_comp"])  # an ablation row: himo-clip with its options
    assert isinstance(task, HiMoCLIPTask) and task.options()["molo_global"] is False
    assert task.options()["molo_lambda"] == 2.0
    task, _ = himo.build_variant("himo-clip", tiny_sub_configs(248), PARTS, **ABLATIONS["table8"]["batch-x2"])
    assert isinstance(task, HiMoCLIPTask)  # the batch factor is the script's, not the task's


def test_himo_longclip_variant_reads_only_the_label_smoothing_given():
    task, _ = method("himo").build_variant("longclip", tiny_sub_configs(248), PARTS, pca_components=4,
                                           preset="released", hide_tau=0.5, label_smoothing=0.2)
    assert isinstance(task, LongCLIPTask)
    assert task.options() == dict(objective="longclip", pca_components=4, label_smoothing=0.2)


def test_himo_variant_from_a_checkpoint_and_the_same_seed_the_same_weights(tmp_path):
    tiny_clip().save_pretrained(tmp_path)
    task, _ = method("himo").build_variant("clip-248", str(tmp_path), PARTS)
    assert isinstance(task.model, HiMoCLIPModel)
    assert task.model.config.text_config.max_position_embeddings == 248  # stretched from 77
    first, _ = method("himo").build_variant("himo-clip", tiny_sub_configs(248), PARTS, seed=3)
    again, _ = method("himo").build_variant("himo-clip", tiny_sub_configs(248), PARTS, seed=3)
    for (name, value), other in zip(first.model.state_dict().items(), again.model.state_dict().values(), strict=True):
        assert torch.equal(value, other), name


@pytest.mark.parametrize("backbone", list(BACKBONES))
def test_ditm_variants_on_each_backbone(tmp_path, backbone):
    tiny_clip().save_pretrained(tmp_path)
    ditm = method("ditm")
    model_class = {"ditm": DITMModel, "himo_clip": HiMoCLIPModel, "onelip": OneLIPModel}[backbone]
    task, processor = ditm.build_variant("vse++", str(tmp_path), PARTS, backbone=backbone, order_weight=0.5)
    assert isinstance(task.model, model_class) and processor.max_length == 248
    assert task.collate_fn.descriptiveness_column == "vse_descriptiveness" and task.options()["order_weight"] == 0.0
    task, _ = ditm.build_variant("adaptive+order", str(tmp_path), PARTS, backbone=backbone, order_weight=0.5,
                                 warmup_steps=4, captions_per_image=2)
    assert task.collate_fn.descriptiveness_column == "descriptiveness" and task.collate_fn.captions_per_image == 2
    assert task.options() == {"margin_scale": 6.0, "order_weight": 0.5, "warmup_steps": 4}


def test_cast_and_its_vit_baseline_read_the_same_pixels():
    cast = method("cast")
    processor = image_processor(None, 32, 16, "slic")
    size = dict(image_size=32, hidden_size=32, num_attention_heads=4, num_clusters=[6, 3])
    task, read = cast.build_variant("cast", None, processor, **size)
    assert isinstance(task.model, CASTForImageClassification) and read is processor
    assert task.model.config.num_segments == 16 and task.model.config.depths == [1, 1, 1]
    task, read = cast.build_variant("vit", None, processor, vit_patch_size=8, **size)
    assert isinstance(task.model, ViTForImageClassification) and task.model.config.num_hidden_layers == 3
    assert list(read.image_mean) == list(processor.image_mean) and list(read.image_std) == list(processor.image_std)
