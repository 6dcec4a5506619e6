"""What HiMoCLIPProcessor does with unusual inputs: 16-bit and other image modes, numpy/torch images, empty
captions, and captions its tokenizer mostly does not know."""

import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from hf_longclip import HiMoCLIPProcessor
from hf_longclip.data.tokenizer import train_scene_tokenizer
from hf_longclip.evaluation import encode_images
from hf_longclip.modeling_common.captions import UnknownTokensWarning, check_texts
from hf_longclip.modeling_common.images import to_rgb_images


def _gradient(height: int = 40, width: int = 48) -> np.ndarray:
    """An 8-bit grey gradient using every level 0..255 (and a second direction, so resizing is not trivial)."""
    ramp = np.linspace(0, 255, height * width).reshape(height, width)
    return np.rint(ramp * 0.75 + np.linspace(0, 63.75, width)[None, :]).astype(np.uint8)


def _pixels(processor, images) -> torch.Tensor:
    return processor(images=images)["pixel_values"]


def _expected(processor, images) -> torch.Tensor:
    """What the image processor alone makes of (8-bit RGB) `images`: the reference for every conversion."""
    return processor.image_processor(images, return_tensors="pt")["pixel_values"]


def _scene_processor() -> HiMoCLIPProcessor:
    tokenizer = train_scene_tokenizer(CAPTIONS)  # word-level, with an unknown token
    return HiMoCLIPProcessor(image_processor=tiny_processor().image_processor, tokenizer=tokenizer)


# ---------------------------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------------------------
def test_ordinary_rgb_images_give_the_same_pixel_values_as_the_image_processor():
    processor, images = tiny_processor(), random_images(3)
    assert torch.equal(_pixels(processor, images), _expected(processor, images))
    assert torch.equal(_pixels(processor, images[0]), _expected(processor, images[:1]))  # a single image
    assert to_rgb_images(images)[1] is images[1]  # RGB images pass through untouched
    arrays = [np.array(image) for image in images]  # HxWx3 uint8 arrays and CxHxW tensors, as before
    assert torch.equal(_pixels(processor, arrays), _expected(processor, images))
    tensors = [torch.from_numpy(array).permute(2, 0, 1) for array in arrays]
    assert torch.equal(_pixels(processor, tensors), _expected(processor, images))
    assert torch.equal(_pixels(processor, np.stack(arrays)), _expected(processor, images))  # a 4-D batch


def test_other_8_bit_modes_keep_their_former_pixel_values():
    """Grey, palette, CMYK and transparent images: what transformers' CLIP image processor made of them before."""
    processor = tiny_processor()
    rgb = random_images(1)[0]
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray(_gradient()))
    for image in [rgb.convert("L"), rgb.convert("P"), rgb.convert("CMYK"), rgba, rgba.convert("LA")]:
        assert torch.equal(_pixels(processor, image), _expected(processor, image)), image.mode


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I"])
def test_16_bit_grayscale_image_becomes_the_8_bit_gradient_not_white(mode):
    levels = _gradient()
    sixteen = levels.astype(np.uint16) * 257  # 0..65535
    assert sixteen.min() == 0 and sixteen.max() == 65535
    if mode == "I":
        image = Image.fromarray(sixteen.astype(np.int32))
    else:
        data = sixteen.astype(">u2" if mode == "I;16B" else "<u2").tobytes()
        image = Image.frombytes(mode, sixteen.shape[::-1], data)
    assert image.mode == mode
    converted = to_rgb_images(image)[0]
    assert converted.mode == "RGB"
    assert np.array_equal(np.asarray(converted), np.repeat(levels[:, :, None], 3, axis=-1))
    processor = tiny_processor()
    expected = _expected(processor, Image.fromarray(levels, mode="L").convert("RGB"))
    assert torch.equal(_pixels(processor, image), expected)
    assert not torch.equal(_pixels(processor, image), _pixels(processor, Image.new("RGB", image.size, "white")))


def test_16_bit_values_are_scaled_by_255_over_65535_not_clipped():
    ramp = np.linspace(0, 65535, 256 * 4).reshape(16, 64).round().astype(np.uint16)
    converted = np.asarray(to_rgb_images(Image.fromarray(ramp))[0])[:, :, 0]
    assert np.array_equal(converted, np.rint(ramp.astype(np.float64) * 255 / 65535).astype(np.uint8))
    assert converted.min() == 0 and converted.max() == 255 and len(np.unique(converted)) == 256


def test_grayscale_numpy_array_equals_the_same_image_as_pil_l():
    processor, levels = tiny_processor(), _gradient()
    as_pil = _pixels(processor, Image.fromarray(levels, mode="L"))
    assert torch.equal(_pixels(processor, levels), as_pil)  # HxW
    assert torch.equal(_pixels(processor, levels[:, :, None]), as_pil)  # HxWx1
    assert torch.equal(_pixels(processor, [levels, levels]), torch.cat([as_pil, as_pil]))
    assert torch.equal(_pixels(processor, levels.astype(np.float32) / 255), as_pil)  # float in [0, 1]
    assert torch.equal(_pixels(processor, levels.astype(np.uint16) * 257), as_pil)  # uint16
    assert torch.equal(_pixels(processor, torch.from_numpy(levels)), as_pil)


def test_float_images_in_0_1_are_unit_intensities_and_f_mode_is_read_by_its_range():
    processor, image = tiny_processor(), random_images(1)[0]
    unit = np.asarray(image).astype(np.float32) / 255
    assert torch.equal(_pixels(processor, unit), _expected(processor, image))  # was nearly black before
    levels = _gradient()
    as_pil = _pixels(processor, Image.fromarray(levels, mode="L"))
    assert torch.equal(_pixels(processor, Image.fromarray(levels.astype(np.float32))), as_pil)  # 0..255
    assert torch.equal(_pixels(processor, Image.fromarray(levels.astype(np.float32) / 255)), as_pil)  # 0..1


def test_images_that_cannot_be_converted_are_refused_naming_their_index():
    processor, good = tiny_processor(), _gradient()
    cases = {
        "dtype object": np.array([[object()] * 4] * 4, dtype=object),
        r"shape \(40, 48, 2\)": np.zeros((40, 48, 2), dtype=np.uint8),
        "negative": -np.ones((40, 48), dtype=np.float32),
        "beyond 16 bits": np.full((40, 48), 70000, dtype=np.int32),
        "NaN": np.full((40, 48), np.nan, dtype=np.float32),
    }
    for what, bad in cases.items():
        with pytest.raises(ValueError, match=rf"image 1 .*{what}"):
            processor(images=[good, bad])
    with pytest.raises(TypeError, match="image 0"):
        processor(images=[3])


# ---------------------------------------------------------------------------------------------------------------
# Captions
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("empty", ["", "   ", "\n\t"])
def test_empty_captions_are_refused_naming_their_index(empty):
    processor = tiny_processor()
    with pytest.raises(ValueError, match="caption 2 is empty"):
        processor(text=["a red circle.", "a cat.", empty], images=random_images(3))
    with pytest.raises(ValueError, match="caption 0 is empty"):
        processor(text=empty)
    with pytest.raises(ValueError, match="caption 1 is int"):
        check_texts(["a cat.", 3])
    check_texts(CAPTIONS)  # fine


def test_the_empty_text_on_purpose_needs_allow_empty_text():
    """HierarCaps's root is the embedding of the empty text: asked for explicitly, it is what it was before."""
    processor = tiny_processor()
    encoded = processor(text=["", "a cat."], padding="longest", allow_empty_text=True)
    assert encoded["input_ids"][0, :2].tolist() == [processor.tokenizer.bos_token_id, processor.tokenizer.eos_token_id]
    assert torch.equal(encoded["input_ids"], processor.tokenizer(["", "a cat."], padding="longest",
                                                                 return_tensors="pt")["input_ids"])
    with pytest.raises(ValueError, match="caption 1 is int"):
        check_texts(["", 3], allow_empty=True)


def _unknown_token_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UnknownTokensWarning)]


def test_mostly_unknown_caption_warns_once_per_processor_naming_the_rate():
    processor = _scene_processor()
    assert processor.tokenizer.unk_token_id is not None
    foreign = "a zebra beside a giraffe under a palm tree"  # 'a' is the one word the scene vocabulary has
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        processor(text=["a red circle in the top left.", foreign])
        processor(text=[foreign, foreign])
        processor(text=foreign, return_tensors=None, padding=False)
    messages = _unknown_token_warnings(caught)
    assert len(messages) == 1, messages
    assert "67% of the tokens of caption 1 are unknown" in messages[0]  # 6 of its 9 words
    assert f"vocabulary of {len(processor.tokenizer)} tokens" in messages[0]

    with warnings.catch_warnings(record=True) as caught:  # another processor warns again, once
        warnings.simplefilter("always")
        _scene_processor()(text=[foreign, foreign, "a red circle."], return_tensors=None, padding=False)
    assert _unknown_token_warnings(caught) == [
        messages[0].replace("caption 1 are", "caption 0 (and 1 more of the 3 captions) are")
    ]


def test_known_captions_do_not_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _scene_processor()(text=CAPTIONS)
        _scene_processor()(text=CAPTIONS[0] + " zebra giraffe", padding="longest")  # a few unknown words
        tiny_processor()(text=CAPTIONS + ["hello world, 2 and 3."])  # CLIP's unknown token is <|endoftext|>
    assert _unknown_token_warnings(caught) == []


def test_the_warning_state_is_not_saved(tmp_path):
    processor = _scene_processor()
    with pytest.warns(UnknownTokensWarning):
        processor(text=["zebra giraffe"])
    processor.save_pretrained(tmp_path)
    assert "unknown" not in json.dumps(json.loads((tmp_path / "processor_config.json").read_text()))
    with pytest.warns(UnknownTokensWarning):
        HiMoCLIPProcessor.from_pretrained(tmp_path)(text=["zebra giraffe"])


def test_special_tokens_mask_is_returned_only_when_asked():
    processor = _scene_processor()
    assert set(processor(text=CAPTIONS)) == {"input_ids", "attention_mask"}
    assert "special_tokens_mask" in processor(text=CAPTIONS, return_special_tokens_mask=True)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation: one conversion
# ---------------------------------------------------------------------------------------------------------------
def test_encode_images_converts_16_bit_images_like_the_processor():
    model, processor, levels = tiny_himo(), tiny_processor(), _gradient()
    sixteen = Image.fromarray(levels.astype(np.uint16) * 257)
    embeds = encode_images(model, processor, [sixteen, Image.fromarray(levels, mode="L")])
    assert torch.allclose(embeds[0], embeds[1])
    ordinary = random_images(2)
    with torch.no_grad():
        direct = model.get_image_features(pixel_values=_expected(processor, ordinary)).pooler_output
    assert torch.allclose(encode_images(model, processor, ordinary), torch.nn.functional.normalize(direct, dim=-1))
