"""OneLIP's RoPE text tower as the text encoder of a real (tiny, randomly initialised) diffusers Stable Diffusion
pipeline on CPU (Sec. 4.4's plug-and-play test): prompts past 77 tokens reach the UNet, and their late words change
the conditioning; the pipeline saves and reloads with it."""

import json

import pytest
import torch

from helpers.builders import tiny_clip, tiny_onelip_processor
from hf_longclip import OneLIPModel
from hf_longclip.integrations.diffusion import OneLIPTextModelForDiffusion, text_encoder_for_diffusion
from hf_longclip.models.onelip import OneLIPTextModel

diffusers = pytest.importorskip("diffusers")
from diffusers import StableDiffusionPipeline  # noqa: E402

from helpers.diffusion import (  # noqa: E402
    CLIP_POSITIONS,
    FIRST_DIFFERENCE,
    LATE_CHANGE,
    PROMPT,
    WIDTH,
    generate,
    long_prompt_pipeline,
    prompt_embeds,
)

LENGTH = 248


@pytest.fixture(scope="module")
def onelip():
    torch.manual_seed(1)
    return OneLIPModel.from_clip(tiny_clip(seed=1), max_length=LENGTH).eval()


@pytest.fixture(scope="module")
def pipe(onelip) -> StableDiffusionPipeline:
    return long_prompt_pipeline(onelip)


def test_the_adapter_returns_the_rope_tower_copied(onelip):
    text_encoder, max_length = text_encoder_for_diffusion(onelip)
    assert type(text_encoder) is OneLIPTextModelForDiffusion and isinstance(text_encoder, OneLIPTextModel)
    assert not text_encoder.training
    assert max_length == LENGTH and text_encoder.config.hidden_size == WIDTH
    own = onelip.text_model.state_dict()
    for name, tensor in text_encoder.state_dict().items():
        assert torch.equal(tensor, own[name]) and tensor.data_ptr() != own[name].data_ptr(), name


def test_prompt_embeds_are_onelips_token_states_and_late_words_change_them(pipe, onelip):
    embeds = prompt_embeds(pipe, PROMPT)
    assert embeds.shape == (1, LENGTH, WIDTH)
    ids = tiny_onelip_processor(LENGTH)(text=[PROMPT, LATE_CHANGE], padding="max_length")["input_ids"]  # as the pipe
    assert (ids[0] != ids[1]).nonzero().min() == FIRST_DIFFERENCE > CLIP_POSITIONS
    with torch.no_grad():
        expected = onelip.get_text_features(input_ids=ids[:1]).last_hidden_state
    torch.testing.assert_close(embeds, expected, rtol=0, atol=1e-6)
    late = prompt_embeds(pipe, LATE_CHANGE)
    # causal attention: every position before the first differing token agrees, every later one moves
    torch.testing.assert_close(embeds[:, :FIRST_DIFFERENCE], late[:, :FIRST_DIFFERENCE], rtol=0, atol=1e-6)
    assert ((embeds - late)[0, FIRST_DIFFERENCE:].abs().amax(dim=-1) > 1e-4).all()
    images = generate(pipe, PROMPT)
    assert images.shape == (1, 16, 16, 3) and not (generate(pipe, LATE_CHANGE) == images).all()


def test_the_pipeline_saves_and_reloads_with_the_rope_text_encoder(pipe, tmp_path):
    """The pipeline records the adapter's class under the integration module, which this process has imported and
    where diffusers finds `PreTrainedModel`: the modeling file is not what diffusers resolves."""
    pipe.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "model_index.json").read_text())["text_encoder"] == [
        "hf_longclip.integrations.diffusion", "OneLIPTextModelForDiffusion"]
    reloaded = StableDiffusionPipeline.from_pretrained(tmp_path)
    assert type(reloaded.text_encoder) is OneLIPTextModelForDiffusion
    assert reloaded.text_encoder.config.max_position_embeddings == reloaded.tokenizer.model_max_length == LENGTH
    assert torch.equal(prompt_embeds(reloaded, PROMPT), prompt_embeds(pipe, PROMPT))
