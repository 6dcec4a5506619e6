"""Long prompts in diffusers' SDXL (text-to-image and img2img), SD 2.x and Flux pipelines, each tiny, randomly
initialised and built from configs on CPU, and Long-CLIP's "no fine-tuning" stretch of any transformers CLIP text
encoder (hf_longclip.integrations.diffusion)."""

import pytest
import torch
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

from helpers.builders import char_clip_tokenizer, tiny_himo, tiny_sub_configs
from helpers.diffusion import FIRST_DIFFERENCE, LATE_CHANGE, PROMPT, generate, prompt_embeds, tiny_pipeline
from hf_longclip import OneLIPConfig, OneLIPModel
from hf_longclip.integrations.diffusion import (
    sdxl_text_components,
    stretch_clip_text_encoder,
    text_encoder_for_diffusion,
)

diffusers = pytest.importorskip("diffusers")
from diffusers import (  # noqa: E402
    AutoencoderKL,
    EulerDiscreteScheduler,
    StableDiffusionPipeline,
    StableDiffusionXLImg2ImgPipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)

LONG = 248
PROJECTION = tiny_sub_configs()["projection_dim"]
WIDTH = tiny_sub_configs()["text_config"]["hidden_size"]


def clip_text_config(**overrides) -> CLIPTextConfig:
    """A tiny CLIP text config with CLIP's 77 positions (OpenCLIP's GELU, as ViT-H and bigG)."""
    return CLIPTextConfig(**{**tiny_sub_configs(77)["text_config"], "hidden_act": "gelu", **overrides})


def stock_encoder_2(seed: int = 2) -> CLIPTextModelWithProjection:
    """A 77-position transformers CLIPTextModelWithProjection, SDXL's OpenCLIP-bigG in miniature."""
    torch.manual_seed(seed)
    return CLIPTextModelWithProjection(clip_text_config(projection_dim=PROJECTION)).eval()


def tokenized(text: str, length: int = LONG) -> torch.Tensor:
    return char_clip_tokenizer()(text, padding="max_length", max_length=length, truncation=True,
                                 return_tensors="pt")["input_ids"]


# --- the generic stretch ---------------------------------------------------------------------------------------


def test_stretch_keeps_the_first_20_rows_and_interpolates_the_rest_fourfold():
    encoder = stock_encoder_2()
    stretched = stretch_clip_text_encoder(encoder)
    assert type(stretched) is CLIPTextModelWithProjection and not stretched.training
    assert stretched.config.max_position_embeddings == LONG and encoder.config.max_position_embeddings == 77
    old = encoder.text_model.embeddings.position_embedding.weight
    new = stretched.text_model.embeddings.position_embedding.weight
    assert new.shape == (LONG, WIDTH)
    # Long-CLIP's rule worked by hand: rows 0..19 kept, row 20 + 4j is old row 20 + j, between them a quarter step
    assert torch.equal(new[:20], old[:20])
    assert torch.allclose(new[20:20 + 4 * 57:4], old[20:77])
    assert torch.allclose(new[21], 0.75 * old[20] + 0.25 * old[21])
    assert torch.allclose(new[-1], old[76] + 0.75 * (old[76] - old[75]))
    for name, tensor in stretched.state_dict().items():
        if "position" not in name:
            assert torch.equal(tensor, encoder.state_dict()[name]), name


def test_a_stretched_encoder_reads_short_texts_as_the_original_and_long_ones_whole():
    encoder = CLIPTextModel(clip_text_config()).eval()
    stretched = stretch_clip_text_encoder(encoder)
    short = char_clip_tokenizer()(["a red circle."], return_tensors="pt")["input_ids"]  # 15 tokens: kept positions
    with torch.no_grad():
        assert torch.equal(stretched(short).last_hidden_state, encoder(short).last_hidden_state)
        late = stretched(torch.cat([tokenized(PROMPT), tokenized(LATE_CHANGE)])).last_hidden_state
    assert not torch.allclose(late[0, FIRST_DIFFERENCE:], late[1, FIRST_DIFFERENCE:])
    with pytest.raises(TypeError, match="CLIPTextModel"):
        stretch_clip_text_encoder(tiny_himo())


# --- SDXL -----------------------------------------------------------------------------------------------------


def tiny_sdxl(components: dict) -> StableDiffusionXLPipeline:
    """A randomly initialised SDXL pipeline whose UNet cross-attends to both encoders' joined hidden states and
    conditions on the second one's pooled embedding (+ 6 size/crop numbers of 8 channels each)."""
    torch.manual_seed(0)
    widths = components["text_encoder"].config.hidden_size + components["text_encoder_2"].config.hidden_size
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16), layers_per_block=1, sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=4, use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + components["text_encoder_2"].config.projection_dim,
        cross_attention_dim=widths, norm_num_groups=4,
    )
    vae = AutoencoderKL(
        block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, sample_size=16,
    )
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       steps_offset=1, timestep_spacing="leading")
    pipe = StableDiffusionXLPipeline(vae=vae, unet=unet, scheduler=scheduler, **components)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def himo():
    return tiny_himo(seed=1)


@pytest.fixture(scope="module")
def sdxl(himo) -> StableDiffusionXLPipeline:
    """HiMo-CLIP as the first encoder, a stretched stock CLIPTextModelWithProjection as the second."""
    return tiny_sdxl(sdxl_text_components(himo, stock_encoder_2(), char_clip_tokenizer(), char_clip_tokenizer()))


def sdxl_embeds(pipe, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    embeds, _, pooled, _ = pipe.encode_prompt(prompt, device="cpu", num_images_per_prompt=1,
                                              do_classifier_free_guidance=False)
    return embeds, pooled


def test_sdxl_components_are_himos_tower_and_the_stretched_encoder_with_long_tokenizers(sdxl, himo):
    assert type(sdxl.text_encoder) is CLIPTextModel and type(sdxl.text_encoder_2) is CLIPTextModelWithProjection
    assert sdxl.tokenizer.model_max_length == sdxl.tokenizer_2.model_max_length == LONG
    assert sdxl.text_encoder_2.config.max_position_embeddings == LONG
    assert torch.equal(sdxl.text_encoder.embeddings.position_embedding.weight,
                       himo.text_model.embeddings.position_embedding.weight)


def test_sdxl_prompt_embeds_are_both_encoders_penultimate_states_and_the_pooled_projection(sdxl):
    embeds, pooled = sdxl_embeds(sdxl, PROMPT)
    assert embeds.shape == (1, LONG, 2 * WIDTH) and pooled.shape == (1, PROJECTION)
    with torch.no_grad():
        first = sdxl.text_encoder(tokenized(PROMPT), output_hidden_states=True)
        second = sdxl.text_encoder_2(tokenized(PROMPT), output_hidden_states=True)
    assert torch.equal(embeds, torch.cat([first.hidden_states[-2], second.hidden_states[-2]], dim=-1))
    assert torch.equal(pooled, second.text_embeds)


def test_sdxl_words_after_token_77_change_embeddings_pooled_embedding_and_image(sdxl):
    (embeds_a, pooled_a), (embeds_b, pooled_b) = sdxl_embeds(sdxl, PROMPT), sdxl_embeds(sdxl, LATE_CHANGE)
    assert torch.equal(embeds_a[:, :FIRST_DIFFERENCE], embeds_b[:, :FIRST_DIFFERENCE])
    assert ((embeds_a - embeds_b)[0, FIRST_DIFFERENCE:].abs().amax(dim=-1) > 1e-4).all()
    assert not torch.allclose(pooled_a, pooled_b)  # pooled at the end-of-text token, ~124 tokens in
    image = generate(sdxl, PROMPT)
    assert image.shape == (1, 16, 16, 3) and not (generate(sdxl, LATE_CHANGE) == image).all()


def test_sdxl_img2img_takes_the_same_components_and_sees_the_late_words(sdxl):
    img2img = StableDiffusionXLImg2ImgPipeline(**sdxl.components)
    img2img.set_progress_bar_config(disable=True)
    start = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))

    def edit(prompt):
        return img2img(prompt, image=start, strength=0.9, num_inference_steps=3, guidance_scale=2.0,
                       output_type="np", generator=torch.Generator().manual_seed(0)).images

    image = edit(PROMPT)
    assert image.shape == (1, 16, 16, 3) and not (edit(LATE_CHANGE) == image).all()


def test_sdxl_pipeline_saves_and_reloads(sdxl, tmp_path):
    sdxl.save_pretrained(tmp_path)
    reloaded = StableDiffusionXLPipeline.from_pretrained(tmp_path)
    assert reloaded.tokenizer.model_max_length == reloaded.tokenizer_2.model_max_length == LONG
    for got, expected in zip(sdxl_embeds(reloaded, PROMPT), sdxl_embeds(sdxl, PROMPT), strict=True):
        assert torch.equal(got, expected)


def test_himo_as_sdxls_second_encoder_pools_its_own_text_features(himo):
    components = sdxl_text_components(tiny_himo(seed=4), himo, char_clip_tokenizer(), char_clip_tokenizer())
    assert type(components["text_encoder_2"]) is CLIPTextModelWithProjection
    _, pooled = sdxl_embeds(tiny_sdxl(components), PROMPT)
    with torch.no_grad():
        assert torch.allclose(pooled, himo.get_text_features(input_ids=tokenized(PROMPT)).pooler_output, atol=1e-6)


def test_sdxl_refuses_encoders_of_different_lengths_and_onelip_as_second_encoder(himo):
    tokenizers = char_clip_tokenizer(), char_clip_tokenizer()
    with pytest.raises(ValueError, match="same number of tokens.*248.*300"):
        sdxl_text_components(himo, tiny_himo(max_positions=300), *tokenizers)
    onelip = OneLIPModel(OneLIPConfig(**tiny_sub_configs(LONG))).eval()
    assert text_encoder_for_diffusion(onelip)[1] == LONG  # as the first encoder it plugs in
    with pytest.raises(ValueError, match="OneLIP has no text encoder with projection"):
        sdxl_text_components(himo, onelip, *tokenizers)
    with pytest.raises(TypeError, match="CLIPTextModelWithProjection"):
        sdxl_text_components(himo, CLIPTextModel(clip_text_config()), *tokenizers)
    # a transformers encoder already longer than 77 (a converted Long-CLIP's text encoder) is taken as it is
    long_first = text_encoder_for_diffusion(himo)[0]
    assert sdxl_text_components(long_first, stock_encoder_2(), *tokenizers)["text_encoder"] is long_first


# --- SD 2.x ---------------------------------------------------------------------------------------------------


def test_sd2_stretched_openclip_encoder_conditions_on_the_whole_long_prompt(tmp_path):
    """SD 2.x: one OpenCLIP ViT-H text encoder whose diffusers checkpoint keeps the layers up to the penultimate one
    (23 of 24), so the last hidden state the pipeline reads is the penultimate layer's (here 1 of 2 layers)."""
    torch.manual_seed(5)
    encoder = stretch_clip_text_encoder(CLIPTextModel(clip_text_config(num_hidden_layers=1)).eval())
    tokenizer = char_clip_tokenizer()
    tokenizer.model_max_length = encoder.config.max_position_embeddings
    pipe = tiny_pipeline(encoder, tokenizer)
    embeds = prompt_embeds(pipe, PROMPT)
    with torch.no_grad():
        assert torch.equal(embeds, encoder(tokenized(PROMPT)).last_hidden_state)
    assert not torch.allclose(embeds[0, FIRST_DIFFERENCE:], prompt_embeds(pipe, LATE_CHANGE)[0, FIRST_DIFFERENCE:])
    assert not (generate(pipe, PROMPT) == generate(pipe, LATE_CHANGE)).all()
    pipe.save_pretrained(tmp_path)
    reloaded = StableDiffusionPipeline.from_pretrained(tmp_path)
    assert reloaded.text_encoder.config.max_position_embeddings == reloaded.tokenizer.model_max_length == LONG
    assert torch.equal(prompt_embeds(reloaded, PROMPT), embeds)


# --- Flux -----------------------------------------------------------------------------------------------------


def tiny_flux(text_encoder, tokenizer):
    """A randomly initialised Flux pipeline: T5 (tiny, random; the character tokenizer stands in for its
    SentencePiece one) gives the per-token embeddings, the CLIP text encoder the pooled one."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(vocab_size=80, d_model=WIDTH, d_ff=64, num_layers=1, num_heads=2, d_kv=16)).eval()
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=WIDTH, pooled_projection_dim=text_encoder.config.hidden_size, axes_dims_rope=[4, 4, 8],
    )
    vae = AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
                        latent_channels=1, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.0609, scaling_factor=1.5035)
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                        tokenizer=tokenizer, text_encoder_2=t5, tokenizer_2=char_clip_tokenizer(),
                        transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_flux_pools_the_long_clip_text_encoder_over_the_whole_prompt(himo, tmp_path):
    from diffusers import FluxPipeline

    text_encoder, max_length = text_encoder_for_diffusion(himo)
    tokenizer = char_clip_tokenizer()
    tokenizer.model_max_length = max_length
    pipe = tiny_flux(text_encoder, tokenizer)

    def encoded(pipe, prompt):
        return pipe.encode_prompt(prompt, prompt_2=None, device="cpu", max_sequence_length=16)

    def pooled(pipe, prompt):
        return encoded(pipe, prompt)[1]

    def image(prompt):
        return pipe(prompt, height=16, width=16, num_inference_steps=2, guidance_scale=3.5, max_sequence_length=16,
                    output_type="np", generator=torch.Generator().manual_seed(0)).images

    with torch.no_grad():
        expected = himo.text_model(tokenized(PROMPT)).pooler_output  # CLIP's pooled output, before the projection
    assert torch.equal(pooled(pipe, PROMPT), expected)
    assert not torch.allclose(pooled(pipe, LATE_CHANGE), expected)
    assert torch.equal(encoded(pipe, PROMPT)[0], encoded(pipe, LATE_CHANGE)[0])  # T5 reads 16 tokens: the same
    assert not (image(PROMPT) == image(LATE_CHANGE)).all()
    pipe.save_pretrained(tmp_path)
    reloaded = FluxPipeline.from_pretrained(tmp_path)
    assert reloaded.tokenizer_max_length == LONG and torch.equal(pooled(reloaded, PROMPT), expected)
