"""A tiny (randomly initialised, a few kilobytes) diffusers Stable Diffusion pipeline on CPU whose text encoder is a
long text tower's (`text_encoder_for_diffusion`), two prompts that differ only after CLIP's 77 tokens, and what the
tests read from a pipeline: its prompt embeddings and a two-step generation."""

import torch
from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel

from helpers.builders import char_clip_tokenizer, tiny_sub_configs
from hf_longclip.integrations.diffusion import text_encoder_for_diffusion

WIDTH = tiny_sub_configs()["text_config"]["hidden_size"]
CLIP_POSITIONS = 77
# the character tokenizer makes each letter, digit and punctuation mark one token (spaces none): the two prompts
# (124 and 123 tokens) share their first 100 tokens, the start token included, and differ only after CLIP's 77
SHARED = ("a red circle in the top left. a small blue square below it. two green triangles on the right, one large "
          "and one small, and")
PROMPT = SHARED + " a yellow cross in the middle."
LATE_CHANGE = SHARED + " a purple disk at the bottom."
FIRST_DIFFERENCE = 100


def tiny_pipeline(text_encoder, tokenizer) -> StableDiffusionPipeline:
    """A randomly initialised Stable Diffusion pipeline a few kilobytes in size whose UNet cross-attends to
    `text_encoder`'s hidden states."""
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16), layers_per_block=1, sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=text_encoder.config.hidden_size, norm_num_groups=4, attention_head_dim=4,
    )
    vae = AutoencoderKL(
        block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, sample_size=16,
    )
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def long_prompt_pipeline(model) -> StableDiffusionPipeline:
    """The tiny pipeline with `model`'s text tower and a tokenizer that keeps as many tokens as the tower takes."""
    text_encoder, max_length = text_encoder_for_diffusion(model)
    tokenizer = char_clip_tokenizer()
    tokenizer.model_max_length = max_length
    return tiny_pipeline(text_encoder, tokenizer)


def prompt_embeds(pipe, prompt: str) -> torch.Tensor:
    embeds, _ = pipe.encode_prompt(prompt, device="cpu", num_images_per_prompt=1, do_classifier_free_guidance=False)
    return embeds


def generate(pipe, prompt: str):
    return pipe(prompt, num_inference_steps=2, guidance_scale=2.0, output_type="np",
                generator=torch.Generator().manual_seed(0)).images
