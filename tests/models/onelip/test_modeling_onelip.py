"""OneLIPModel: NTK-scaled RoPE (Eq. 2, Sec. 4.1) against transformers and a hand formula, RoPE attention against an
independent complex rotation, any max_length, from_clip, causality, save/load; OneLIPForPreTraining (TRIM-Refine's
queries in its forward, its checkpoints loading as OneLIPModel without a warning); the task's TRIM options."""

import math

import pytest
import torch
from transformers import AutoModel, AutoModelForPreTraining, AutoModelForZeroShotImageClassification, PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor, tiny_processor
from hf_longclip import OneLIPConfig, OneLIPForPreTraining, OneLIPModel, OneLIPProcessor
from hf_longclip.integrations.diffusion import text_encoder_for_diffusion
from hf_longclip.modeling_common.transformer import SelfAttention
from hf_longclip.models.onelip import OneLIPTextConfig, OneLIPTextModel
from hf_longclip.models.onelip.modeling_onelip import inverse_frequencies
from hf_longclip.recipes.onelip.task import OneLIPTask
from hf_longclip.training.task import save_options, saved_options

LONG_TEXT = " ".join(CAPTIONS * 6)  # about 1,000 character tokens


@pytest.mark.parametrize("target_length", [77, 248, 512])
def test_ntk_frequencies_equal_transformers_and_the_hand_formula(target_length):
    config = OneLIPTextConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=1,
                              max_position_embeddings=target_length)
    d, gamma, theta = 16, 8.0, 10000.0
    base = theta * ((gamma * target_length / 77) - (gamma - 1)) ** (d / (d - 2))
    by_hand = torch.tensor([1.0 / base ** (2 * i / d) for i in range(d // 2)])
    reference = PretrainedConfig(hidden_size=d, num_attention_heads=1, head_dim=d, max_position_embeddings=77,
                                 rope_parameters={"rope_type": "dynamic", "rope_theta": theta, "factor": gamma})
    by_transformers, _ = ROPE_INIT_FUNCTIONS["dynamic"](reference, seq_len=target_length)
    actual = inverse_frequencies(config)
    torch.testing.assert_close(actual, by_hand, rtol=1e-6, atol=0)
    torch.testing.assert_close(actual, by_transformers, rtol=0, atol=0)
    if target_length == 77:
        torch.testing.assert_close(actual, 1.0 / theta ** (torch.arange(0, d, 2) / d))  # factor 1: plain RoPE
    torch.testing.assert_close(OneLIPTextModel(config).rotary.inv_freq, actual, rtol=0, atol=0)


def _complex_rotation(x: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """RoPE as a complex product: the pair (x_i, x_{i + d/2}) is x_i + j x_{i + d/2}, turned by m * theta_i."""
    half = x.shape[-1] // 2
    positions = torch.arange(x.shape[-2], dtype=torch.float64)
    turns = torch.polar(torch.ones(x.shape[-2], half, dtype=torch.float64), positions[:, None] * inv_freq.double())
    rotated = torch.complex(x[..., :half].double(), x[..., half:].double()) * turns
    return torch.cat([rotated.real, rotated.imag], dim=-1)


@pytest.mark.parametrize("output_attentions", [True, False])  # the explicit softmax, or SDPA
def test_rope_attention_equals_an_independent_rotation(output_attentions):
    text_config = OneLIPTextConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1)
    torch.manual_seed(0)
    attention = SelfAttention(text_config, is_causal=True).eval()
    rotary = OneLIPTextModel(text_config).rotary
    inv_freq = rotary.inv_freq
    hidden = torch.randn(2, 11, 16)
    future = torch.ones(11, 11, dtype=torch.bool).triu(1)
    with torch.no_grad():  # no mask: causal by `is_causal`, as the text model runs it without padding
        actual, weights = attention(hidden, None, rotary(torch.arange(11)[None]), output_attentions)
    assert (weights is None) != output_attentions

    def heads(x):
        return x.double().view(2, 11, 2, 8).transpose(1, 2)

    q = _complex_rotation(heads(attention.q_proj(hidden)), inv_freq)
    k = _complex_rotation(heads(attention.k_proj(hidden)), inv_freq)
    v = heads(attention.v_proj(hidden))
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    scores = scores.masked_fill(future, float("-inf"))
    expected = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 11, 16)
    expected = attention.out_proj(expected.float())
    torch.testing.assert_close(actual, expected.detach(), atol=1e-5, rtol=1e-5)


def test_explicit_softmax_and_sdpa_text_encoders_agree():
    """The text encoder runs SDPA, and the explicit softmax when the attention weights are asked for: the same
    states, padded texts (a boolean mask) included."""
    model = OneLIPModel.from_clip(tiny_clip()).eval()
    inputs = tiny_processor()(text=CAPTIONS, padding="longest")
    assert not inputs["attention_mask"].all()
    with torch.no_grad():
        sdpa = model.get_text_features(**inputs).pooler_output
        explicit = model.get_text_features(**inputs, output_attentions=True)
    assert len(explicit.attentions) == model.config.text_config.num_hidden_layers
    torch.testing.assert_close(sdpa, explicit.pooler_output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("max_length", [77, 248, 512])
def test_any_max_length(max_length):
    model = OneLIPModel.from_clip(tiny_clip(), max_length=max_length).eval()
    assert model.config.text_config.max_position_embeddings == max_length
    assert model.config.text_config.base_length == 77
    processor = tiny_processor(max_length=max_length)
    long = processor(text=[LONG_TEXT])
    assert long["input_ids"].shape == (1, max_length)
    with torch.no_grad():
        embedding = model.get_text_features(**long).pooler_output
        assert torch.isfinite(embedding).all()
        if max_length == 512:  # a 400-token text: its tokens past 248 change the embedding
            words = tiny_processor(max_length=400)(text=[LONG_TEXT], padding="max_length")
            first = tiny_processor(max_length=248)(text=[LONG_TEXT])
            whole = model.get_text_features(**processor(text=[processor.decode(words["input_ids"][0][1:-1])]))
            assert (whole.pooler_output - model.get_text_features(**first).pooler_output).abs().max() > 1e-3
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.get_text_features(input_ids=torch.ones(1, max_length + 1, dtype=torch.long))


def test_first_tokens_do_not_see_later_ones():
    """Causal attention: the long encoder's states at positions < 77 on the whole text are its states on the first 77
    tokens alone (what L_coarse, Eq. 3, compares without a second forward pass)."""
    model = OneLIPModel.from_clip(tiny_clip()).eval()
    ids = tiny_processor()(text=[LONG_TEXT])["input_ids"]
    with torch.no_grad():
        whole = model.text_model(input_ids=ids).last_hidden_state
        prefix = torch.cat([ids[:, :76], torch.ones(1, 1, dtype=torch.long)], dim=1)  # end token at 76
        first = model.text_model(input_ids=prefix).last_hidden_state
    torch.testing.assert_close(whole[:, :76], first[:, :76], atol=1e-5, rtol=1e-5)


def test_from_clip_copies_every_clip_weight_but_the_position_table(tmp_path):
    clip = tiny_clip()
    clip.save_pretrained(tmp_path / "clip")
    pixel_values = tiny_processor()(images=random_images(3))["pixel_values"]
    for source in (clip, str(tmp_path / "clip")):
        model = OneLIPModel.from_clip(source).eval()
        with torch.no_grad():
            torch.testing.assert_close(model.get_image_features(pixel_values=pixel_values).pooler_output,
                                       clip.get_image_features(pixel_values=pixel_values).pooler_output,
                                       rtol=0, atol=0)
        state = model.state_dict()
        for name, tensor in clip.state_dict().items():
            if name == "text_model.embeddings.position_embedding.weight":
                assert name not in state
            else:
                assert torch.equal(state[name].reshape(tensor.shape), tensor), name
        assert model.logit_scale.shape == (1,)
        assert not hasattr(model, "trim_refine")  # the pre-training head's
    pretraining = OneLIPForPreTraining.from_clip(clip)
    assert pretraining.trim_refine.queries.shape == (77, 32)
    for name, tensor in model.state_dict().items():
        assert torch.equal(pretraining.onelip.state_dict()[name], tensor), name


def test_save_and_reload_give_the_same_model(tmp_path):
    clip = tiny_clip()
    model = OneLIPModel.from_clip(clip, max_length=512).eval()
    task = OneLIPTask(OneLIPForPreTraining.from_clip(clip, max_length=512), None, teacher=clip, trim_top_k=50,
                      trim_rank=4)
    processor = tiny_onelip_processor(512)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    save_options(task, tmp_path)  # TRIM's options are the task's, saved beside the checkpoint
    reloaded = OneLIPModel.from_pretrained(tmp_path).eval()
    assert OneLIPProcessor.from_pretrained(tmp_path).max_length == 512
    assert (saved_options(reloaded)["trim_top_k"], saved_options(reloaded)["trim_rank"]) == (50, 4)
    assert not hasattr(reloaded.config, "trim_top_k")
    torch.testing.assert_close(reloaded.text_model.rotary.inv_freq, model.text_model.rotary.inv_freq, rtol=0, atol=0)
    inputs = processor(text=CAPTIONS, images=random_images(4))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits_per_image, model(**inputs).logits_per_image)


def test_config_validation():
    for bad, name in ((dict(text_config=dict(hidden_size=12, num_attention_heads=4)), "head dimension"),
                      (dict(text_config=dict(rope_gamma=0.5)), "rope_gamma")):
        with pytest.raises(ValueError, match=name):
            OneLIPConfig(**bad)


@pytest.mark.parametrize("bad, name", [
    (dict(trim_alpha=1.5), "trim_alpha"), (dict(trim_top_k=0), "trim_top_k"), (dict(trim_rank=0), "trim_rank"),
    (dict(weights=(0.2, -1.0, 0.7)), "weights"), (dict(weights_after=(0.05, 0.25, -0.7)), "weights"),
    (dict(weight_switch_step=-1), "weight_switch_step"),
], ids=["trim_alpha", "trim_top_k", "trim_rank", "weights", "weights_after", "weight_switch_step"])
def test_task_option_validation(bad, name):
    """TRIM's and Eq. 10's options are the task's: each bad one is a ValueError naming it (token_distillation:
    tests/recipes/onelip/test_ablation_onelip.py)."""
    clip = tiny_clip()
    with pytest.raises(ValueError, match=name):
        OneLIPTask(OneLIPForPreTraining.from_clip(clip), None, teacher=clip, **bad)


def test_task_option_defaults_follow_section_4_1():
    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip)
    assert not hasattr(model, "objective")
    options = OneLIPTask(model, None, teacher=clip).options()
    assert options == {"trim_alpha": 0.5, "trim_top_k": 100, "trim_rank": 8, "trim_decomposition": "auto",
                       "weights": (0.2, 0.1, 0.7), "weights_after": (0.05, 0.25, 0.7), "weight_switch_step": 5000,
                       "token_distillation": "trim", "hard_negatives": None}


def test_text_encoder_stands_alone(tmp_path):
    """The long text encoder saves and reloads on its own (the diffusers adapter hands it out), with the same
    outputs."""
    model = OneLIPModel.from_clip(tiny_clip(), max_length=512).eval()
    encoder, _ = text_encoder_for_diffusion(model)
    assert isinstance(encoder, OneLIPTextModel) and encoder.config.max_position_embeddings == 512
    copied, original = encoder.embeddings.token_embedding.weight, model.text_model.embeddings.token_embedding.weight
    assert copied.data_ptr() != original.data_ptr()
    encoder.save_pretrained(tmp_path)
    reloaded = OneLIPTextModel.from_pretrained(tmp_path).eval()
    ids = tiny_processor(max_length=512)(text=[LONG_TEXT])["input_ids"]
    with torch.no_grad():
        expected = model.get_text_features(input_ids=ids).last_hidden_state
        torch.testing.assert_close(reloaded(ids)[0], expected, rtol=0, atol=0)


def test_every_parameter_of_the_pretraining_model_takes_part_in_its_forward():
    """TRIM-Refine's queries are the head of `OneLIPForPreTraining`: its forward (with the task's TRIM-Select or
    over every valid token) reaches every weight, so DDP needs no `find_unused_parameters`."""
    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip).train()
    batch = dict(tiny_onelip_processor()(text=CAPTIONS, images=random_images(4), padding="longest"))
    objective = OneLIPTask(model, None, teacher=clip, trim_top_k=3).objective
    for selection in ({}, objective.token_selection()):  # every valid token, then TRIM-Select's K = 3
        model.zero_grad()
        out = model(**batch, return_loss=True, **selection)
        assert out.refined_text_states.shape == (4, 77, 32)
        (out.loss + out.refined_text_states.square().mean()).backward()
        assert [name for name, param in model.named_parameters() if param.grad is None] == []
    # without a selection, TRIM-Refine (Eq. 6) attends over each text's valid tokens
    with torch.no_grad():
        out = model(**batch)
    states = out.text_model_output.last_hidden_state[1]
    valid = batch["attention_mask"][1].bool()  # the end token is the last attended one
    expected = torch.softmax(model.trim_refine.queries @ states[valid].T / math.sqrt(32), dim=-1) @ states[valid]
    torch.testing.assert_close(out.refined_text_states[1], expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the base model's outputs unchanged by the head
        plain = model.onelip(**batch)
    torch.testing.assert_close(out.logits_per_image, plain.logits_per_image, rtol=0, atol=0)
    with pytest.raises(TypeError, match="OneLIPForPreTraining"):
        OneLIPTask(OneLIPModel.from_clip(clip), None, teacher=clip)


def _load_report(load, *args, **kwargs) -> str:
    """What transformers logs while `load(*args, **kwargs)` runs (its load report of missing / unexpected keys)."""
    logger = logging.get_logger("transformers")
    with CaptureLogger(logger) as captured:
        load(*args, **kwargs)
    return captured.out


def test_pretraining_checkpoints_load_as_the_model_without_a_warning(tmp_path):
    """`OneLIPForPreTraining` saves the queries under `trim_refine.` and the model under `onelip.`: `OneLIPModel`
    (and AutoModel, zero-shot classification) loads it silently without the queries, AutoModelForPreTraining with
    them; a `OneLIPModel` checkpoint loads into `OneLIPForPreTraining` with fresh queries, reported as missing."""
    pretraining = OneLIPForPreTraining.from_clip(tiny_clip()).eval()
    pretraining.save_pretrained(tmp_path / "pretraining")
    auto_map = PretrainedConfig.get_config_dict(tmp_path / "pretraining")[0]["auto_map"]
    assert auto_map["AutoModel"] == auto_map["AutoModelForZeroShotImageClassification"] == "modeling_onelip.OneLIPModel"
    assert auto_map["AutoModelForPreTraining"] == "modeling_onelip.OneLIPForPreTraining"
    inputs = tiny_onelip_processor()(text=CAPTIONS, images=random_images(4))
    with torch.no_grad():
        expected = pretraining(**inputs).logits_per_image
    previous = logging.get_verbosity()
    logging.set_verbosity_warning()
    try:
        for auto in (OneLIPModel, AutoModel, AutoModelForZeroShotImageClassification):
            assert _load_report(auto.from_pretrained, tmp_path / "pretraining", trust_remote_code=True) == ""
            model = auto.from_pretrained(tmp_path / "pretraining", trust_remote_code=True).eval()
            assert type(model).__name__ == "OneLIPModel"
            with torch.no_grad():
                torch.testing.assert_close(model(**inputs).logits_per_image, expected, rtol=0, atol=0)
        reloaded = AutoModelForPreTraining.from_pretrained(tmp_path / "pretraining", trust_remote_code=True)
        assert type(reloaded).__name__ == "OneLIPForPreTraining"
        assert torch.equal(reloaded.trim_refine.queries, pretraining.trim_refine.queries)
        model.save_pretrained(tmp_path / "model")
        report = _load_report(OneLIPForPreTraining.from_pretrained, tmp_path / "model")
        assert "trim_refine.queries" in report and "MISSING" in report
    finally:
        logging.set_verbosity(previous)
