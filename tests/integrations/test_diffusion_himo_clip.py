"""HiMo-CLIP's 248-token text tower as the text encoder of a real (tiny, randomly initialised) diffusers Stable
Diffusion pipeline on CPU: long prompts reach the UNet whole (OneLIP Sec. 4.4's plug-and-play text encoder)."""

import pytest
import torch
from transformers import CLIPTextConfig, CLIPTextModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from helpers.builders import char_clip_tokenizer, tiny_himo, tiny_processor, tiny_sub_configs
from hf_longclip.integrations.diffusion import TEXT_ENCODERS, register_text_encoder, text_encoder_for_diffusion

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
    tiny_pipeline,
)


@pytest.fixture(scope="module")
def himo():
    return tiny_himo(seed=1)


@pytest.fixture(scope="module")
def long_pipe(himo) -> StableDiffusionPipeline:
    return long_prompt_pipeline(himo)


@pytest.fixture(scope="module")
def stock_pipe() -> StableDiffusionPipeline:
    """The same pipeline with a stock CLIP text encoder of 77 positions and its 77-token tokenizer."""
    torch.manual_seed(2)
    text_encoder = CLIPTextModel(CLIPTextConfig(**tiny_sub_configs(CLIP_POSITIONS)["text_config"])).eval()
    tokenizer = char_clip_tokenizer()
    tokenizer.model_max_length = CLIP_POSITIONS
    return tiny_pipeline(text_encoder, tokenizer)


def test_the_adapter_returns_a_clip_text_model_with_the_long_towers_config_and_weights(himo):
    rng_state = torch.random.get_rng_state()
    text_encoder, max_length = text_encoder_for_diffusion(himo)
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # built without random initialisation
    assert type(text_encoder) is CLIPTextModel and not text_encoder.training
    assert max_length == text_encoder.config.max_position_embeddings == 248
    # the text config, with the model's projection width (which also describes the single-file encoder's projection)
    assert text_encoder.config.to_dict() == {**himo.config.text_config.to_dict(),
                                             "projection_dim": himo.config.projection_dim}
    himo_state = himo.text_model.state_dict()
    for name, tensor in text_encoder.state_dict().items():
        assert torch.equal(tensor, himo_state[name]), name
        assert tensor.data_ptr() != himo_state[name].data_ptr(), f"{name} is shared, not copied"


def test_pipeline_prompt_embeds_are_the_himo_text_models_last_hidden_state_beyond_77_tokens(long_pipe, himo):
    embeds = prompt_embeds(long_pipe, PROMPT)
    assert embeds.shape == (1, 248, WIDTH)
    input_ids = tiny_processor()(text=[PROMPT], padding="max_length")["input_ids"]  # to 248, as the pipeline pads
    with torch.no_grad():
        expected = himo.get_text_features(input_ids=input_ids).last_hidden_state
    assert torch.equal(embeds, expected)


def test_words_after_token_77_change_the_conditioning_only_with_the_long_encoder(long_pipe, stock_pipe):
    ids = tiny_processor()(text=[PROMPT, LATE_CHANGE])["input_ids"]
    assert [len(row) for row in char_clip_tokenizer()([PROMPT, LATE_CHANGE])["input_ids"]] == [124, 123]
    assert (ids[0] != ids[1]).nonzero().min() == FIRST_DIFFERENCE > CLIP_POSITIONS

    long_a, long_b = prompt_embeds(long_pipe, PROMPT), prompt_embeds(long_pipe, LATE_CHANGE)
    assert long_a.shape == long_b.shape == (1, 248, WIDTH)
    # causal attention: the positions before the change agree, every later one moves
    assert torch.equal(long_a[:, :FIRST_DIFFERENCE], long_b[:, :FIRST_DIFFERENCE])
    assert ((long_a - long_b)[0, FIRST_DIFFERENCE:].abs().amax(dim=-1) > 1e-4).all()
    stock_a, stock_b = prompt_embeds(stock_pipe, PROMPT), prompt_embeds(stock_pipe, LATE_CHANGE)
    assert stock_a.shape == (1, CLIP_POSITIONS, WIDTH)
    assert torch.equal(stock_a, stock_b)  # truncated at 77 tokens: the late words never reach the UNet


def test_two_step_generation_runs_and_sees_the_late_words(long_pipe, stock_pipe):
    images = generate(long_pipe, PROMPT)
    assert images.shape == (1, 16, 16, 3) and images.dtype.kind == "f"
    assert ((images >= 0) & (images <= 1)).all()
    assert not (generate(long_pipe, LATE_CHANGE) == images).all()
    stock = generate(stock_pipe, PROMPT)
    assert (generate(stock_pipe, LATE_CHANGE) == stock).all()


def test_the_pipeline_saves_and_reloads_with_the_long_text_encoder(long_pipe, tmp_path):
    long_pipe.save_pretrained(tmp_path)
    reloaded = StableDiffusionPipeline.from_pretrained(tmp_path)
    assert type(reloaded.text_encoder) is CLIPTextModel
    assert reloaded.text_encoder.config.max_position_embeddings == reloaded.tokenizer.model_max_length == 248
    assert torch.equal(prompt_embeds(reloaded, PROMPT), prompt_embeds(long_pipe, PROMPT))


class ToyTextConfig(PretrainedConfig):
    model_type = "toy_long_text"

    def __init__(self, vocab_size=80, hidden_size=WIDTH, max_position_embeddings=300, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.max_position_embeddings = max_position_embeddings
        super().__init__(**kwargs)


class ToyTextModel(PreTrainedModel):
    """A text model without positions or CLIP parts (OneLIP's RoPE tower will be another such): running sums of
    token embeddings, so every token conditions every later position."""

    config_class = ToyTextConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return BaseModelOutput(last_hidden_state=self.embed(input_ids).cumsum(dim=1))


class ToyLongModel:
    def __init__(self):
        torch.manual_seed(3)
        self.text = ToyTextModel(ToyTextConfig()).eval()


def test_any_model_with_an_adapter_plugs_in_and_models_without_one_are_refused(himo, monkeypatch):
    monkeypatch.setitem(TEXT_ENCODERS, ToyLongModel, None)  # removed again after the test
    register_text_encoder(ToyLongModel, lambda model, with_projection: model.text)
    text_encoder, max_length = text_encoder_for_diffusion(ToyLongModel())
    assert type(text_encoder) is ToyTextModel and max_length == 300
    tokenizer = char_clip_tokenizer()
    tokenizer.model_max_length = max_length
    pipe = tiny_pipeline(text_encoder, tokenizer)
    embeds = prompt_embeds(pipe, PROMPT)
    assert embeds.shape == (1, 300, WIDTH)
    assert not torch.equal(embeds, prompt_embeds(pipe, LATE_CHANGE))
    with pytest.raises(TypeError, match="register_text_encoder"):
        text_encoder_for_diffusion(himo.vision_model)
