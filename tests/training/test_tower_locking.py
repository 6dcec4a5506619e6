"""Tower locking (open_clip's --lock-image / --lock-text): a locked tower gets no gradient and no AdamW state, its
weights stay bit-identical through training, and `*_unlocked_layers` leaves its last blocks, final norm and
projection training."""

import pytest
import torch
from transformers import HfArgumentParser

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from helpers.cast import tiny_classifier
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import train
from hf_longclip.training.optimizer import lock_tower, parameter_groups


def _spy_optimizer(monkeypatch) -> list:
    seen, original = [], torch.optim.AdamW.__init__

    def spy(self, params, *args, **kwargs):
        original(self, params, *args, **kwargs)
        seen.append(self)

    monkeypatch.setattr(torch.optim.AdamW, "__init__", spy)
    return seen


def _train(accelerator, tmp_path, model, **lock):
    rows = [{"image": image, "caption": caption} for image, caption in zip(random_images(len(CAPTIONS)), CAPTIONS)]
    args = LoopArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=len(rows),
                         learning_rate=1e-2, warmup_steps=0, **lock)
    train(HiMoCLIPTask(model, ImageTextCollator(tiny_processor())), rows, args, accelerator)


def test_locked_image_tower_has_no_gradient_no_state_and_does_not_move(accelerator, tmp_path, monkeypatch):
    model = tiny_himo()
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    seen = _spy_optimizer(monkeypatch)
    _train(accelerator, tmp_path, model, lock_image=True)
    (optimizer,) = seen
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    with_state = {id(p) for p in optimizer.state}
    for name, param in model.named_parameters():
        image = name.startswith(("vision_model.", "visual_projection."))
        assert (id(param) in in_optimizer) is not image, name
        assert (id(param) in with_state) is not image, name
        if image:
            assert param.grad is None and not param.requires_grad, name
            assert torch.equal(param, before[name]), name
    assert not torch.equal(model.text_model.embeddings.token_embedding.weight,
                           before["text_model.embeddings.token_embedding.weight"])


def test_unlocked_layers_leave_the_last_blocks_norm_and_projection(monkeypatch):
    model = tiny_himo()  # two text blocks
    frozen = lock_tower(model, "text", unlocked_layers=1)
    trainable = {name for name, param in model.named_parameters() if param.requires_grad}
    assert not any(name.startswith("text_model.encoder.layers.0.") for name in trainable)
    assert not any(name.startswith("text_model.embeddings.") for name in trainable)
    assert any(name.startswith("text_model.encoder.layers.1.") for name in trainable)
    assert {"text_model.final_layer_norm.weight", "text_projection.weight"} <= trainable
    assert any(name.startswith("vision_model.") for name in trainable)  # the other tower is untouched
    expected = sum(p.numel() for name, p in model.named_parameters()
                   if name.startswith(("text_model.embeddings.", "text_model.encoder.layers.0.")))
    assert frozen == expected
    groups = parameter_groups(model, 0.1)
    assert sum(p.numel() for g in groups for p in g["params"]) == sum(p.numel() for p in model.parameters()) - frozen


def test_locking_a_tower_a_model_lacks_fails_clearly():
    with pytest.raises(ValueError, match="no text tower"):
        lock_tower(tiny_classifier(), "text")
    assert lock_tower(tiny_classifier(), "image") > 0  # a classifier's backbone is its image tower
    with pytest.raises(ValueError, match="has 2 blocks"):
        lock_tower(tiny_himo(), "image", unlocked_layers=3)


def test_flags_parse_and_are_checked():
    (args,) = HfArgumentParser(LoopArguments).parse_args_into_dataclasses(
        ["--lock_image", "--lock_image_unlocked_layers", "1", "--lock_text"])
    assert args.lock_image and args.lock_image_unlocked_layers == 1 and args.lock_text
    with pytest.raises(ValueError, match="needs --lock_text"):
        LoopArguments(lock_text_unlocked_layers=1)
