"""Conversion of a processor's raw images, shared by the models' processors.

`to_rgb_images` turns whatever a user passes (PIL images of any mode, numpy arrays, torch tensors, paths)
into 8-bit RGB PIL images, the one form every image processor handles the same way, or refuses it naming the
image's index and what it got. The rules:

* 8-bit data is kept as it is: an RGB PIL image is returned unchanged (same object), so ordinary inputs give the
  same `pixel_values` as before; other PIL modes (`L`, `P`, `1`, `CMYK`, `YCbCr`, ...) go through PIL's
  `convert("RGB")`, a grey level repeated over the three channels.
* 16-bit data (`I;16`, `I;16B`, `I;16L`, `I;16N` images, `uint16` arrays) is scaled by 255/65535 and rounded
  (`65535 -> 255`), not clipped: PIL's own conversion clips every value above 255, which makes an ordinary
  16-bit photograph all white.
* Data whose type does not say its scale (`I` and `F` images, integer arrays other than uint8/uint16, float
  arrays and tensors) is read by its value range: floats all within [0, 1] are unit intensities (x 255); else
  values all within [0, 255] are 8-bit levels; else values all within [0, 65535] are 16-bit levels (x 255/65535);
  negative, larger or non-finite values are refused. The range is that of each image on its own (a very dark
  16-bit image whose values all stay <= 255 is therefore read as 8-bit, and a float image of 8-bit levels all <= 1
  as unit intensities: both nearly black images).
* Transparency (`RGBA`, `LA`, `PA`, `P` or `L` with a transparent colour, 4-channel arrays) is composited onto
  white, not dropped. It is what transformers' CLIP image processors do (so these inputs, too, keep their former
  `pixel_values`), and a transparent region's hidden colour is arbitrary (often black, or leftover pixels), while
  transparent images (logos, icons, cut-outs) are drawn to be seen on a light page.
* Arrays and tensors are HxW (grey), HxWxC or CxHxW with C = 1 (grey), 3 (RGB) or 4 (RGBA); when both the first and
  the last axis could be channels the first is taken, as transformers does. A 4-dimensional array or tensor is a
  batch of such images; lists may nest one level (flattened, as transformers' image processors do).
* A `str` is a path to an image file, an `http(s)://` URL or base64 data, read as transformers' `load_image`
  reads it (files and base64 without its RGB conversion, so they follow the rules above; a URL is fetched and
  converted by transformers itself). `bytes` are an image file's content (a training shard's sample), read exactly
  as that file would be. Files are decoded in full here, so a truncated or corrupt one is refused with its index.
* An image with no pixel (0 x N) is refused.

This module is part of the models' remote-code bundles, so it imports only the standard library, numpy, PIL,
torch, transformers and its siblings (see `hf_longclip.export`).
"""

import base64
import binascii
import io
import os

import numpy as np
import PIL.Image
import PIL.ImageOps
import torch

_SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")
_CHANNELS = (1, 3, 4)


def _describe(image) -> str:
    if isinstance(image, PIL.Image.Image):
        return f"a PIL image of mode {image.mode!r} and size {image.size}"
    if isinstance(image, (np.ndarray, torch.Tensor)):
        kind = "an array" if isinstance(image, np.ndarray) else "a tensor"
        return f"{kind} of shape {tuple(image.shape)} and dtype {image.dtype}"
    text = repr(image)
    return f"{type(image).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _is_array(item) -> bool:
    return isinstance(item, (np.ndarray, torch.Tensor))


def _flatten(images) -> list:
    """The single images of `images`: one image, a list/tuple of images (one nesting level), or 4-D batches."""
    if isinstance(images, (PIL.Image.Image, str, bytes)):
        return [images]
    if _is_array(images):
        return list(images) if images.ndim == 4 else [images]
    if not isinstance(images, (list, tuple)):
        raise TypeError(
            f"images must be a PIL image, a numpy array, a torch tensor, a path or URL, an image file's bytes, or a "
            f"list of them; got {_describe(images)}"
        )
    flat = []
    for item in images:
        if isinstance(item, (list, tuple)):
            for inner in item:
                flat.extend(list(inner) if _is_array(inner) and inner.ndim == 4 else [inner])
        elif _is_array(item) and item.ndim == 4:
            flat.extend(list(item))
        else:
            flat.append(item)
    return flat


def _load(source: str | bytes) -> PIL.Image.Image:
    """A path, an image file's bytes or a base64 string opened and decoded by PIL (orientation from EXIF applied,
    mode kept); a URL as transformers' `load_image` fetches it."""
    if isinstance(source, bytes):
        image = PIL.Image.open(io.BytesIO(source))
    elif source.startswith(("http://", "https://")):
        from transformers.image_utils import load_image

        return load_image(source)
    elif os.path.isfile(source):
        image = PIL.Image.open(source)
    else:
        data = source.split(",", 1)[1] if source.startswith("data:image/") else source
        try:
            image = PIL.Image.open(io.BytesIO(base64.decodebytes(data.encode())))
        except (binascii.Error, ValueError, OSError) as error:
            raise ValueError(f"not an image file, an http(s) URL nor base64 image data ({error})") from None
    image.load()  # decode now: a truncated file fails here, naming the image
    return PIL.ImageOps.exif_transpose(image)


def _to_uint8(values: np.ndarray) -> np.ndarray:
    """`values` (any layout) as 8-bit levels, by dtype (uint8, uint16, bool) or else by value range."""
    if values.dtype == np.uint8:
        return values
    if values.dtype == np.bool_:
        return values.astype(np.uint8) * 255
    if values.dtype == np.uint16:
        return np.rint(values / 257.0).astype(np.uint8)  # 255/65535 = 1/257: 65535 -> 255
    floating = np.issubdtype(values.dtype, np.floating)
    if not (floating or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"dtype {values.dtype} is not a number type")
    if values.size == 0:
        raise ValueError("it is empty")
    values = values.astype(np.float64)
    if floating and not np.isfinite(values).all():
        raise ValueError("it holds NaN or infinite values")
    low, high = float(values.min()), float(values.max())
    if low < 0:
        raise ValueError(f"its values range over [{low:g}, {high:g}]; negative values have no intensity scale")
    if floating and high <= 1.0:
        scale = 255.0
    elif high <= 255.0:
        scale = 1.0
    elif high <= 65535.0:
        scale = 1 / 257.0
    else:
        raise ValueError(
            f"its values range over [{low:g}, {high:g}], beyond 16 bits; pass unit (0..1), 8-bit or 16-bit intensities"
        )
    return np.rint(values * scale).astype(np.uint8)


def _array_to_rgb(array: np.ndarray) -> PIL.Image.Image:
    if array.ndim == 2:
        array = array[:, :, None]
    elif array.ndim == 3:
        if array.shape[0] in _CHANNELS:  # channels first (also when both ends could be channels, as transformers)
            array = np.moveaxis(array, 0, -1)
        elif array.shape[-1] not in _CHANNELS:
            raise ValueError(
                "neither its first nor its last axis has 1, 3 or 4 channels; pass HxW, HxWxC or CxHxW images"
            )
    else:
        raise ValueError(f"an image has 2 (HxW) or 3 (HxWxC, CxHxW) dimensions, not {array.ndim}")
    if 0 in array.shape:
        raise ValueError("it is empty")
    levels = _to_uint8(array)
    channels = levels.shape[-1]
    if channels == 1:
        return PIL.Image.fromarray(np.ascontiguousarray(levels[:, :, 0]), mode="L").convert("RGB")
    if channels == 4:  # composite onto white, exactly as transformers' `convert_to_rgb` does for arrays
        alpha = levels[:, :, 3:4] / 255
        levels = np.round(alpha * levels[:, :, :3] + (1 - alpha) * 255).astype(np.uint8)
    return PIL.Image.fromarray(np.ascontiguousarray(levels), mode="RGB")


def _has_transparency(image: PIL.Image.Image) -> bool:
    if hasattr(image, "has_transparency_data"):  # Pillow >= 10.1
        return image.has_transparency_data
    return "A" in image.getbands() or image.info.get("transparency") is not None


def _pil_to_rgb(image: PIL.Image.Image) -> PIL.Image.Image:
    if 0 in image.size:
        raise ValueError("it has no pixel")
    if image.mode == "RGB":
        return image
    if image.mode in _SIXTEEN_BIT_MODES or image.mode in ("I", "F"):
        return _array_to_rgb(np.asarray(image))
    if _has_transparency(image):  # as transformers' `convert_to_rgb`: onto white
        rgba = image.convert("RGBA")
        return PIL.Image.alpha_composite(PIL.Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return image.convert("RGB")


def _to_rgb(image) -> PIL.Image.Image:
    if isinstance(image, (str, bytes)):
        image = _load(image)
    if isinstance(image, PIL.Image.Image):
        return _pil_to_rgb(image)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu()
        image = image.float() if image.is_floating_point() and image.dtype != torch.float64 else image
        image = image.numpy()
    if isinstance(image, np.ndarray):
        return _array_to_rgb(image)
    raise TypeError("expected a PIL image, a numpy array, a torch tensor, a path, URL or base64 string, or an image "
                    "file's bytes")


def to_rgb_images(images) -> list[PIL.Image.Image]:
    """`images` (one image, a list of images, or a 4-D batch) as a list of 8-bit RGB PIL images, by the rules in
    this module's docstring; raises ValueError (TypeError for an unsupported type) naming the image's index and what
    it got when an image cannot be converted."""
    flat = _flatten(images)
    if not flat:
        raise ValueError("images is empty: pass at least one image")
    converted = []
    for index, image in enumerate(flat):
        try:
            converted.append(_to_rgb(image))
        except (ValueError, TypeError, OSError) as error:
            kind = TypeError if isinstance(error, TypeError) else ValueError
            raise kind(f"image {index} ({_describe(image)}) cannot be converted to RGB: {error}") from error
    return converted


__all__ = ["to_rgb_images"]
