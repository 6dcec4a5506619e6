"""Per-module learning-rate multipliers and layer-wise decay in the shared loop's AdamW groups (DITM's recipe:
0.01x vision, 0.1x text, decay 0.7 per block), and unchanged groups when neither is asked for."""

import pytest
import torch
from transformers import HfArgumentParser, get_cosine_schedule_with_warmup

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.arguments import LoopArguments, parse_lr_multipliers
from hf_longclip.training.loop import train
from hf_longclip.training.lora import LoraArguments, apply_lora
from hf_longclip.training.optimizer import parameter_groups

BASE_LR = 1e-3


def _old_parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """The function as it was before the options existed, transcribed."""
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _same_groups(actual: list[dict], expected: list[dict]) -> bool:
    return [{k: v for k, v in g.items() if k != "params"} for g in actual] == [
        {k: v for k, v in g.items() if k != "params"} for g in expected
    ] and [[id(p) for p in g["params"]] for g in actual] == [[id(p) for p in g["params"]] for g in expected]


def _lr_of(groups: list[dict]) -> dict[int, tuple[float, float]]:
    """id(param) -> (lr, weight_decay) of its group (each parameter in exactly one group)."""
    out = {}
    for group in groups:
        for param in group["params"]:
            assert id(param) not in out
            out[id(param)] = (group["lr"], group["weight_decay"])
    return out


def test_defaults_give_exactly_the_old_groups():
    model = tiny_himo()
    expected = _old_parameter_groups(model, 0.1)
    assert _same_groups(parameter_groups(model, 0.1), expected)
    assert _same_groups(parameter_groups(model, 0.1, BASE_LR, "", 1.0), expected)
    args = LoopArguments()
    assert args.lr_multipliers == "" and args.layer_decay == 1.0
    got = parameter_groups(model, args.weight_decay, args.learning_rate, args.lr_multipliers, args.layer_decay)
    assert _same_groups(got, _old_parameter_groups(model, args.weight_decay)) and len(got) == 2
    # frozen parameters stay out, as before
    model.text_model.requires_grad_(False)
    assert _same_groups(parameter_groups(model, 0.1, BASE_LR), _old_parameter_groups(model, 0.1))


def test_tower_multipliers_scale_each_parameters_lr():
    model = tiny_himo()
    groups = parameter_groups(model, 0.1, BASE_LR, "vision_model=0.01,text_model=0.1")
    lrs = _lr_of(groups)
    named = dict(model.named_parameters())
    assert set(lrs) == {id(p) for p in named.values()}
    for name, param in named.items():
        factor = 0.01 if name.startswith("vision_model.") else 0.1 if name.startswith("text_model.") else 1.0
        assert lrs[id(param)] == (pytest.approx(BASE_LR * factor), 0.1 if param.ndim >= 2 else 0.0), name
    # unmatched: projections and logit scale keep the base lr
    assert lrs[id(model.logit_scale)][0] == BASE_LR and lrs[id(model.visual_projection.weight)][0] == BASE_LR
    # largest factor first, decay before no-decay: 6 groups, the first at the base lr
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [
        (BASE_LR, 0.1), (BASE_LR, 0.0), (pytest.approx(BASE_LR * 0.1), 0.1), (pytest.approx(BASE_LR * 0.1), 0.0),
        (pytest.approx(BASE_LR * 0.01), 0.1), (pytest.approx(BASE_LR * 0.01), 0.0)]
    # within a group, parameters keep model order
    order = {id(p): i for i, p in enumerate(model.parameters())}
    for group in groups:
        positions = [order[id(p)] for p in group["params"]]
        assert positions == sorted(positions)


def test_longest_prefix_wins_and_prefixes_match_whole_components():
    model = tiny_himo()
    lrs = _lr_of(parameter_groups(model, 0.1, BASE_LR, "text_model=0.1, text_model.embeddings=0.5 ,logit_scale=2"))
    named = dict(model.named_parameters())
    assert lrs[id(named["text_model.embeddings.token_embedding.weight"])][0] == pytest.approx(BASE_LR * 0.5)
    assert lrs[id(named["text_model.encoder.layers.0.mlp.fc1.weight"])][0] == pytest.approx(BASE_LR * 0.1)
    assert lrs[id(model.logit_scale)][0] == pytest.approx(BASE_LR * 2)
    # 'text' is not a prefix of 'text_model...' (components, not characters)
    with pytest.raises(ValueError, match="'text'"):
        parameter_groups(model, 0.1, BASE_LR, "text=0.1")


def test_layer_decay_factors_by_hand():
    """2 blocks per tower: embeddings/pre-norm layer 0 -> 0.7^3, block 0 -> 0.7^2, block 1 -> 0.7, final norm 1."""
    model = tiny_himo()
    lrs = _lr_of(parameter_groups(model, 0.1, BASE_LR, layer_decay=0.7))
    expected = {
        "text_model.embeddings.token_embedding.weight": 0.343,
        "text_model.embeddings.position_embedding.weight": 0.343,
        "text_model.encoder.layers.0.self_attn.q_proj.weight": 0.49,
        "text_model.encoder.layers.0.layer_norm1.bias": 0.49,
        "text_model.encoder.layers.1.mlp.fc2.weight": 0.7,
        "text_model.final_layer_norm.weight": 1.0,
        "vision_model.embeddings.class_embedding": 0.343,
        "vision_model.embeddings.patch_embedding.weight": 0.343,
        "vision_model.pre_layrnorm.weight": 0.343,
        "vision_model.encoder.layers.0.mlp.fc1.weight": 0.49,
        "vision_model.encoder.layers.1.self_attn.k_proj.bias": 0.7,
        "vision_model.post_layernorm.bias": 1.0,
        "visual_projection.weight": 1.0,
        "text_projection.weight": 1.0,
        "logit_scale": 1.0,
    }
    named = dict(model.named_parameters())
    for name, factor in expected.items():
        assert lrs[id(named[name])][0] == pytest.approx(BASE_LR * factor), name

    # combined multiplicatively with the tower multipliers (DITM: 0.01 vision, 0.1 text, decay 0.7)
    lrs = _lr_of(parameter_groups(model, 0.1, BASE_LR, "vision_model=0.01,text_model=0.1", 0.7))
    for name, factor in expected.items():
        tower = 0.01 if name.startswith("vision_model.") else 0.1 if name.startswith("text_model.") else 1.0
        assert lrs[id(named[name])][0] == pytest.approx(BASE_LR * factor * tower), name


def test_scheduler_keeps_the_group_ratios():
    model = tiny_himo()
    groups = parameter_groups(model, 0.1, BASE_LR, "vision_model=0.01,text_model=0.1", 0.7)
    optimizer = torch.optim.AdamW(groups, lr=BASE_LR)
    initial = [g["lr"] for g in optimizer.param_groups]
    scheduler = get_cosine_schedule_with_warmup(optimizer, 2, 10)
    for _ in range(5):
        optimizer.step()
        scheduler.step()
        lrs = [g["lr"] for g in optimizer.param_groups]
        scale = lrs[0] / initial[0]
        assert 0 < scale and lrs == pytest.approx([lr * scale for lr in initial], rel=1e-12)


def test_wrapper_prefixes_are_stripped_under_peft():
    peft_model = apply_lora(tiny_himo(), LoraArguments(lora_r=4))
    groups = parameter_groups(peft_model, 0.1, BASE_LR, "vision_model=0.01,text_model=0.1", 0.7)
    lrs = _lr_of(groups)
    named = dict(peft_model.named_parameters())
    trainable = {name for name, param in named.items() if param.requires_grad}
    assert set(lrs) == {id(named[name]) for name in trainable}
    a = "base_model.model.vision_model.encoder.layers.1.self_attn.q_proj.lora_A.default.weight"
    b = "base_model.model.text_model.encoder.layers.0.self_attn.v_proj.lora_B.default.weight"
    assert lrs[id(named[a])][0] == pytest.approx(BASE_LR * 0.01 * 0.7)
    assert lrs[id(named[b])][0] == pytest.approx(BASE_LR * 0.1 * 0.49)


@pytest.mark.parametrize("spec", ["vision_model", "vision_model=", "vision_model=abc", "=0.1", "vision_model=0",
                                  "vision_model=-1", "vision_model=inf", "a=1,a=2"])
def test_malformed_specs_fail_early(spec):
    with pytest.raises(ValueError, match="lr_multipliers"):
        parse_lr_multipliers(spec)
    with pytest.raises(ValueError, match="lr_multipliers"):
        LoopArguments(lr_multipliers=spec)


def test_unknown_prefix_and_bad_decay_fail_clearly():
    model = tiny_himo()
    with pytest.raises(ValueError, match="'visual_model'"):
        parameter_groups(model, 0.1, BASE_LR, "visual_model=0.01,text_model=0.1")
    for decay in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="layer_decay"):
            LoopArguments(layer_decay=decay)
        with pytest.raises(ValueError, match="layer_decay"):
            parameter_groups(model, 0.1, BASE_LR, layer_decay=decay)
    with pytest.raises(ValueError, match="no transformer tower"):
        parameter_groups(torch.nn.Linear(2, 2), 0.1, BASE_LR, layer_decay=0.7)
    assert parse_lr_multipliers(" vision_model = 0.01 , text_model=0.1, ") == {"vision_model": 0.01, "text_model": 0.1}


def test_flags_parse():
    (args,) = HfArgumentParser(LoopArguments).parse_args_into_dataclasses(
        ["--lr_multipliers", "vision_model=0.01,text_model=0.1", "--layer_decay", "0.7"])
    assert args.lr_multipliers == "vision_model=0.01,text_model=0.1" and args.layer_decay == 0.7


def test_train_uses_the_multipliers(accelerator, tmp_path, monkeypatch):
    model = tiny_himo()
    processor = tiny_processor()
    rows = [{"image": image, "caption": caption} for image, caption in zip(random_images(len(CAPTIONS)), CAPTIONS)]
    args = LoopArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=len(rows),
                         learning_rate=BASE_LR, warmup_steps=0, logging_steps=1,
                         lr_multipliers="vision_model=0.01,text_model=0.1", layer_decay=0.7)
    seen = []
    original = torch.optim.AdamW.__init__

    def spy(self, params, *a, **kw):
        original(self, params, *a, **kw)
        seen.append(self)

    monkeypatch.setattr(torch.optim.AdamW, "__init__", spy)
    _, history = train(HiMoCLIPTask(model, ImageTextCollator(processor)), rows, args, accelerator)
    assert [h["step"] for h in history] == [1, 2]
    (optimizer,) = seen
    by_param = {id(p): g["initial_lr"] for g in optimizer.param_groups for p in g["params"]}
    assert by_param[id(model.vision_model.encoder.layers[1].mlp.fc1.weight)] == pytest.approx(BASE_LR * 0.01 * 0.7)
    assert by_param[id(model.text_model.embeddings.token_embedding.weight)] == pytest.approx(BASE_LR * 0.1 * 0.343)
    assert by_param[id(model.text_projection.weight)] == BASE_LR
    # the first group holds the unmatched parameters at the base rate
    assert optimizer.param_groups[0]["initial_lr"] == BASE_LR
    final = [g["lr"] / g["initial_lr"] for g in optimizer.param_groups]
    assert final == pytest.approx([final[0]] * len(final))


def test_history_logs_the_base_rate_when_a_module_learns_faster(accelerator, tmp_path):
    """A multiplier above 1 puts its module's group first; the logged `lr` is still the base rate's schedule value
    (F-CAST's pooling learns at 10x: its loss curves' `lr` is the towers' rate)."""
    rows = [{"image": image, "caption": caption} for image, caption in zip(random_images(len(CAPTIONS)), CAPTIONS)]
    args = LoopArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=len(rows),
                         learning_rate=BASE_LR, warmup_steps=0, logging_steps=1, lr_multipliers="visual_projection=10")
    _, history = train(HiMoCLIPTask(tiny_himo(), ImageTextCollator(tiny_processor())), rows, args, accelerator)
    # cosine without warm-up over 2 steps: half the peak after the first, zero after the second
    assert [h["lr"] for h in history] == [pytest.approx(BASE_LR * 0.5), pytest.approx(0.0, abs=1e-12)]
