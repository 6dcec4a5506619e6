"""Stable Diffusion 3 with HiMo-CLIP's long text tower (with its projection) in the CLIP-L slot (`text_encoder`), on a
tiny, randomly initialised `StableDiffusion3Pipeline` built from configs on CPU (component sizes after diffusers' own
SD3 fast tests): a prompt past 77 tokens reaches the encoder whole.

SD3 pads or cuts the prompts of both CLIP encoders to one length, `pipe.tokenizer_max_length`, which is
`tokenizer.model_max_length` (CLIP-L's tokenizer) read when the pipeline is built (`tokenizer_2`'s own length is not
read), joins their penultimate hidden states feature by feature, pads that to T5's width and puts T5's tokens after
it; its pooled embedding is both encoders' projected end-of-text embeddings, joined. So CLIP-G (`text_encoder_2`) must
take as many tokens as CLIP-L: a stretched stock encoder (`stretch_clip_text_encoder`) or one of our models with a
projection; a 77-position one fails on the first prompt."""

import pytest
import torch
from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

from helpers.builders import char_clip_tokenizer, tiny_himo, tiny_sub_configs
from helpers.diffusion import FIRST_DIFFERENCE, LATE_CHANGE, PROMPT
from helpers.numerics import rounding_atol, transformer_roundings
from hf_longclip.integrations.diffusion import stretch_clip_text_encoder, text_encoder_for_diffusion

diffusers = pytest.importorskip("diffusers")
from diffusers import (  # noqa: E402
    AutoencoderKL,
    FlowMatchEulerDiscreteScheduler,
    SD3Transformer2DModel,
    StableDiffusion3Pipeline,
)

LONG = 248
T5_TOKENS = 16  # `max_sequence_length` of the calls: the tiny T5 reads 16 tokens
PROJECTION = tiny_sub_configs()["projection_dim"]
WIDTH = tiny_sub_configs()["text_config"]["hidden_size"]
T5_WIDTH = 2 * WIDTH  # the joined CLIP states (CLIP-L's, CLIP-G's) fit T5's width: SD3 pads them to it, none is cut


def stock_clip_g(seed: int = 2) -> CLIPTextModelWithProjection:
    """A 77-position transformers CLIPTextModelWithProjection (OpenCLIP's GELU), SD3's CLIP-G in miniature."""
    torch.manual_seed(seed)
    config = CLIPTextConfig(**{**tiny_sub_configs(77)["text_config"], "hidden_act": "gelu"}, projection_dim=PROJECTION)
    return CLIPTextModelWithProjection(config).eval()


def long_tokenizer(length: int = LONG):
    tokenizer = char_clip_tokenizer()
    tokenizer.model_max_length = length
    return tokenizer


def tiny_sd3(text_encoder, text_encoder_2, tokenizer, tokenizer_2) -> StableDiffusion3Pipeline:
    """A randomly initialised SD3 pipeline: the two CLIP encoders given, a tiny random T5 (the character tokenizer
    stands in for its SentencePiece one), an SD3 transformer reading T5_WIDTH-wide tokens and both pooled
    embeddings."""
    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(vocab_size=80, d_model=T5_WIDTH, d_ff=64, num_layers=1, num_heads=2,
                                 d_kv=16)).eval()
    transformer = SD3Transformer2DModel(
        sample_size=32, patch_size=1, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=4,
        caption_projection_dim=32, joint_attention_dim=T5_WIDTH, out_channels=4,
        pooled_projection_dim=text_encoder.config.projection_dim + text_encoder_2.config.projection_dim,
    )
    vae = AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
                        latent_channels=4, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.0609, scaling_factor=1.5035)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
        tokenizer=tokenizer, text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2, text_encoder_3=t5,
        tokenizer_3=char_clip_tokenizer(),
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tokenized(text: str) -> torch.Tensor:
    return char_clip_tokenizer()(text, padding="max_length", max_length=LONG, truncation=True,
                                 return_tensors="pt")["input_ids"]


def sd3_embeds(pipe, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    embeds, _, pooled, _ = pipe.encode_prompt(prompt, prompt_2=None, prompt_3=None, device="cpu",
                                              do_classifier_free_guidance=False, max_sequence_length=T5_TOKENS)
    return embeds, pooled


def generate(pipe, prompt: str):
    return pipe(prompt, height=16, width=16, num_inference_steps=2, guidance_scale=2.0,
                max_sequence_length=T5_TOKENS, output_type="np", generator=torch.Generator().manual_seed(0)).images


@pytest.fixture(scope="module")
def himo():
    return tiny_himo(seed=1)


@pytest.fixture(scope="module")
def sd3(himo) -> StableDiffusion3Pipeline:
    """HiMo-CLIP's tower with projection as CLIP-L, a stretched stock encoder as CLIP-G, both tokenizers at 248."""
    clip_l, max_length = text_encoder_for_diffusion(himo, with_projection=True)
    return tiny_sd3(clip_l, stretch_clip_text_encoder(stock_clip_g()), long_tokenizer(max_length),
                    long_tokenizer(max_length))


def test_sd3_clip_l_part_is_himos_penultimate_states_and_projection_over_the_whole_prompt(sd3, himo):
    assert type(sd3.text_encoder) is CLIPTextModelWithProjection and sd3.tokenizer_max_length == LONG
    assert (sd3.tokenizer(PROMPT, return_tensors="pt")["input_ids"].shape[1]) > FIRST_DIFFERENCE > 77
    embeds, pooled = sd3_embeds(sd3, PROMPT)
    assert embeds.shape == (1, LONG + T5_TOKENS, T5_WIDTH) and pooled.shape == (1, 2 * PROJECTION)
    ids = tokenized(PROMPT)
    with torch.no_grad():
        clip_l = himo.text_model(ids, output_hidden_states=True).hidden_states[-2]
        features = himo.get_text_features(input_ids=ids).pooler_output
        clip_g = sd3.text_encoder_2(ids, output_hidden_states=True)
        t5 = sd3.text_encoder_3(char_clip_tokenizer()(PROMPT, padding="max_length", max_length=T5_TOKENS,
                                                      truncation=True, return_tensors="pt")["input_ids"])[0]
    # the first 248 tokens: CLIP-L's states beside CLIP-G's (nothing padded: they fill T5's width); then T5's tokens
    assert torch.equal(embeds[:, :LONG, :WIDTH], clip_l)
    assert torch.equal(embeds[:, :LONG, WIDTH:], clip_g.hidden_states[-2])
    # T5 (not ours) ran with gradients in the pipeline, here without: torch may take another kernel, within a
    # 1-layer transformer's roundings
    torch.testing.assert_close(embeds[:, LONG:], t5, rtol=0, atol=rounding_atol(t5, transformer_roundings(1)))
    assert torch.allclose(pooled[:, :PROJECTION], features, atol=1e-6)
    assert torch.equal(pooled[:, PROJECTION:], clip_g.text_embeds)


def test_sd3_words_after_token_77_change_the_clip_embeddings_pooled_embedding_and_image(sd3):
    (embeds_a, pooled_a), (embeds_b, pooled_b) = sd3_embeds(sd3, PROMPT), sd3_embeds(sd3, LATE_CHANGE)
    clip_a, clip_b = embeds_a[:, :LONG, :WIDTH], embeds_b[:, :LONG, :WIDTH]
    assert torch.equal(clip_a[:, :FIRST_DIFFERENCE], clip_b[:, :FIRST_DIFFERENCE])
    assert ((clip_a - clip_b)[0, FIRST_DIFFERENCE:].abs().amax(dim=-1) > 1e-4).all()
    assert not torch.allclose(pooled_a[:, :PROJECTION], pooled_b[:, :PROJECTION])  # pooled ~124 tokens in
    assert torch.equal(embeds_a[:, LONG:], embeds_b[:, LONG:])  # T5 reads 16 tokens: the same
    image = generate(sd3, PROMPT)
    assert image.shape == (1, 16, 16, 3) and not (generate(sd3, LATE_CHANGE) == image).all()


def test_sd3_pipeline_saves_and_reloads(sd3, tmp_path):
    sd3.save_pretrained(tmp_path)
    reloaded = StableDiffusion3Pipeline.from_pretrained(tmp_path)
    assert reloaded.tokenizer_max_length == reloaded.text_encoder.config.max_position_embeddings == LONG
    for got, expected in zip(sd3_embeds(reloaded, PROMPT), sd3_embeds(sd3, PROMPT), strict=True):
        assert torch.equal(got, expected)


def test_sd3_clip_g_takes_clip_ls_length_and_may_be_himo_too(himo):
    clip_l, max_length = text_encoder_for_diffusion(himo, with_projection=True)
    # tokenizer_2's own length is not read: CLIP-G gets CLIP-L's 248 tokens, so a 77-position CLIP-G fails
    unstretched = tiny_sd3(clip_l, stock_clip_g(), long_tokenizer(), long_tokenizer(77))
    with pytest.raises(ValueError, match="248.*max_position_embeddings: 77"):
        sd3_embeds(unstretched, PROMPT)
    # HiMo-CLIP in both slots: CLIP-G's part of the pooled embedding is its own text features
    second = tiny_himo(seed=4)
    clip_g = text_encoder_for_diffusion(second, with_projection=True)[0]
    embeds, pooled = sd3_embeds(tiny_sd3(clip_l, clip_g, long_tokenizer(), long_tokenizer(77)), PROMPT)
    with torch.no_grad():
        features = second.get_text_features(input_ids=tokenized(PROMPT)).pooler_output
        states = second.text_model(tokenized(PROMPT), output_hidden_states=True).hidden_states[-2]
    assert torch.allclose(pooled[:, PROJECTION:], features, atol=1e-6)
    assert torch.equal(embeds[:, :LONG, WIDTH:], states)
