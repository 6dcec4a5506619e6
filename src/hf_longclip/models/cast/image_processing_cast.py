"""CAST image processor: resized, centre-cropped, normalised pixels and a superpixel label map per image (CAST's
input, F-CAST Sec. 3.1). Superpixels are computed on the CPU, per image, where the processor runs (in data-loader
workers when a collate function calls it), after whatever augmentation produced the image.

Algorithms (`superpixel_method`): "seeds", OpenCV contrib's SEEDS (Van den Bergh et al. 2012) in LAB space with
CAST's settings (one block level, prior 2; 15 histogram bins and 20 iterations as its MoCo v3 pre-training and linear
probe compute them, `moco-v3/suppix_utils/datasets_seeds.py`; its DeiT training, `deit/datasets_seeds.py`, uses 5
bins and 15 iterations); "slic", scikit-image's SLIC (Achanta et al. 2012). F-CAST's learned SFCN superpixels
(Yang et al. 2020, App. B) need trained weights that are not available offline: "sfcn" raises an error saying so;
another algorithm is one more entry of `SUPERPIXEL_METHODS` (a function (H, W, 3) uint8 RGB, segment count -> (H, W)
integer labels).

OpenCV and scikit-image (the extra `hf-longclip[cast]`) are imported by the superpixel functions, when superpixels are
first computed (`modeling_common.optional.require`, whose error names the packages): constructing, saving or loading
the processor, or passing superpixel ids computed before, needs neither.
"""

import numpy as np
import PIL.Image
from transformers import BatchFeature
from transformers.image_processing_utils import BaseImageProcessor
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from hf_longclip.modeling_common.images import to_rgb_images
from hf_longclip.modeling_common.optional import require
from hf_longclip.modeling_common.saving import CodeBundleMixin

from .configuration_cast import STEM_STRIDE

REFERENCE_SIZE, REFERENCE_SEGMENTS = 224, 196  # F-CAST's 196 superpixels at 224 px; other sizes keep the density
SEEDS_SETTINGS = dict(num_levels=1, prior=2, double_step=False)  # CAST's datasets_seeds.py
SEEDS_HISTOGRAM_BINS, SEEDS_ITERATIONS = 15, 20  # CAST's moco-v3/suppix_utils/datasets_seeds.py
RESAMPLING = {"bicubic": PIL.Image.Resampling.BICUBIC, "bilinear": PIL.Image.Resampling.BILINEAR}
SUPERPIXEL_INPUTS = ("crop", "denormalized")
SUPERPIXEL_PACKAGES = ("opencv-contrib-python-headless", "scikit-image")  # the extra `hf-longclip[cast]`
SFCN_UNAVAILABLE = (
    "superpixel_method='sfcn': F-CAST's learned SFCN superpixels (Yang et al. 2020) need trained network weights, "
    "which cannot be fetched here; use 'seeds' (CAST's) or 'slic', or register an SFCN function in "
    "SUPERPIXEL_METHODS"
)


def _superpixel_module(name: str):
    """`cv2` or `skimage.segmentation`, imported on first use; a missing one names the extra and its packages."""
    return require(name, "cast", SUPERPIXEL_PACKAGES, "CAST's superpixels")


def _require_ximgproc():
    """cv2, with SEEDS: it lives in OpenCV's contrib modules (`cv2.ximgproc`), which plain `opencv-python` lacks."""
    cv2 = _superpixel_module("cv2")
    if not hasattr(cv2, "ximgproc"):
        raise ImportError(
            "superpixel_method='seeds' needs OpenCV's contrib modules (cv2.ximgproc), which this OpenCV build lacks "
            "(opencv-python or opencv-python-headless): pip uninstall opencv-python opencv-python-headless && pip "
            "install opencv-contrib-python-headless; or use superpixel_method='slic'"
        )
    return cv2


def seeds_superpixels(image: np.ndarray, num_segments: int, iterations: int = SEEDS_ITERATIONS,
                      histogram_bins: int = SEEDS_HISTOGRAM_BINS) -> np.ndarray:
    """SEEDS superpixels of an (H, W, 3) uint8 RGB image in LAB space, as CAST computes them."""
    cv2 = _require_ximgproc()
    height, width = image.shape[:2]
    seeds = cv2.ximgproc.createSuperpixelSEEDS(width, height, 3, num_segments, histogram_bins=histogram_bins,
                                               **SEEDS_SETTINGS)
    seeds.iterate(cv2.cvtColor(image, cv2.COLOR_RGB2LAB), iterations)
    return seeds.getLabels()


def slic_superpixels(image: np.ndarray, num_segments: int, compactness: float = 10.0) -> np.ndarray:
    """scikit-image's SLIC superpixels of an (H, W, 3) uint8 RGB image (its LAB k-means)."""
    segmentation = _superpixel_module("skimage.segmentation")
    return segmentation.slic(image, n_segments=num_segments, compactness=compactness, start_label=0)


def _sfcn_superpixels(image: np.ndarray, num_segments: int) -> np.ndarray:
    raise ValueError(SFCN_UNAVAILABLE)


SUPERPIXEL_METHODS = {"seeds": seeds_superpixels, "slic": slic_superpixels, "sfcn": _sfcn_superpixels}


def relabel_contiguous(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..n-1 (in increasing order of the old ids), n the number of distinct ids."""
    _, inverse = np.unique(labels, return_inverse=True)
    return inverse.reshape(labels.shape).astype(np.int64)


def compute_superpixels(image: np.ndarray, num_segments: int, method: str = "seeds", **options) -> np.ndarray:
    """(H, W) int64 superpixel ids 0..n-1 with n <= `num_segments` of an (H, W, 3) uint8 RGB image; `options` go to
    the method's function (e.g. SEEDS' `iterations`, `histogram_bins`).

    An algorithm may return fewer segments than asked (SEEDS' block grid, flat images), which the model treats as
    padding; where it returns more (SLIC's grid rounding) it is asked again for proportionally fewer."""
    if method not in SUPERPIXEL_METHODS:
        raise ValueError(f"superpixel_method must be one of {sorted(SUPERPIXEL_METHODS)}, got {method!r}")
    height, width = image.shape[:2]
    if num_segments > height * width:
        raise ValueError(f"{num_segments} segments asked of a {height}x{width} image with {height * width} pixels")
    request = num_segments
    while True:
        labels = relabel_contiguous(SUPERPIXEL_METHODS[method](image, request, **options))
        found = int(labels.max()) + 1
        if found <= num_segments:
            return labels
        if request == 1:
            raise ValueError(f"superpixel method {method!r} returned {found} segments when asked for one")
        request = max(1, min(request - 1, request * num_segments // found))


class CASTImageProcessor(CodeBundleMixin, BaseImageProcessor):
    r"""
    Prepares images for [`CASTVisionModel`]: `pixel_values` (B, 3, size, size) and `superpixels` (B, size, size),
    each image's superpixel ids 0..n-1 (n <= num_segments; fewer segments leave padding ids the model masks).

    Images of any mode (grayscale, RGBA, 16-bit, arrays, tensors) are converted to RGB as the library's other
    processors do (`modeling_common.images.to_rgb_images`); each is resized (shortest edge to `resize_size`) and
    centre-cropped to `size` x `size` with torchvision's `Resize` and `CenterCrop` rounding; superpixels are
    computed on that crop.

    size (`int`, defaults to 224):
        Side of the square crop, at least the stem stride (8 px).
    resize_size (`int`, *optional*):
        Shortest edge before the centre crop, at least `size`; by default `size` (released CAST's evaluation: 256).
    resample (`str`, defaults to `"bicubic"`):
        "bicubic" or "bilinear" resizing (released CAST: bilinear in its MoCo v3 linear probe, bicubic in DeiT).
    num_segments (`int`, *optional*):
        Superpixels per image; by default 196 at 224 px and the same density at other sizes
        (round(196 * size^2 / 224^2)). The model's `num_segments` must be at least this.
    superpixel_method (`str`, defaults to `"seeds"`):
        "seeds" (CAST's), "slic", or "sfcn" (unavailable: its weights cannot be fetched; see the module docstring).
    seeds_histogram_bins (`int`, defaults to 15), seeds_iterations (`int`, defaults to 20):
        SEEDS' colour histogram bins and iterations (CAST's MoCo v3 scripts: 15 and 20; its DeiT scripts: 5, 15).
    superpixel_input (`str`, defaults to `"crop"`):
        The uint8 image superpixels are computed on: "crop" (the crop itself, which is also what CAST's MoCo v3
        scripts recover from their [0, 1] tensors) or "denormalized" (CAST's DeiT scripts: the normalised pixels
        mapped back with mean and std in float64, times 255, truncated to uint8, which lowers some values by one).
    image_mean, image_std (`list[float]`, default ImageNet's):
        Normalisation of the pixel values (CAST trains with ImageNet's statistics).
    """

    model_input_names = ["pixel_values", "superpixels"]

    def __init__(self, size: int = REFERENCE_SIZE, num_segments: int | None = None, superpixel_method: str = "seeds",
                 image_mean: list[float] | None = None, image_std: list[float] | None = None,
                 resize_size: int | None = None, resample: str = "bicubic",
                 seeds_histogram_bins: int = SEEDS_HISTOGRAM_BINS, seeds_iterations: int = SEEDS_ITERATIONS,
                 superpixel_input: str = "crop", **kwargs):
        if num_segments is None:
            num_segments = max(1, round(REFERENCE_SEGMENTS * size**2 / REFERENCE_SIZE**2))
        if size < STEM_STRIDE:
            raise ValueError(f"size ({size}) is smaller than CAST's stem stride ({STEM_STRIDE} px)")
        if not 1 <= num_segments <= size**2:
            raise ValueError(f"num_segments must be in [1, {size**2}] (the pixels of a {size} px crop), "
                             f"got {num_segments}")
        if superpixel_method not in SUPERPIXEL_METHODS:
            raise ValueError(f"superpixel_method must be one of {sorted(SUPERPIXEL_METHODS)}, "
                             f"got {superpixel_method!r}")
        if superpixel_method == "sfcn":
            raise ValueError(SFCN_UNAVAILABLE)
        resize_size = size if resize_size is None else resize_size
        if resize_size < size:
            raise ValueError(f"resize_size ({resize_size}) must be at least the crop size ({size})")
        if resample not in RESAMPLING:
            raise ValueError(f"resample must be one of {sorted(RESAMPLING)}, got {resample!r}")
        if superpixel_input not in SUPERPIXEL_INPUTS:
            raise ValueError(f"superpixel_input must be one of {SUPERPIXEL_INPUTS}, got {superpixel_input!r}")
        if min(seeds_histogram_bins, seeds_iterations) < 1:
            raise ValueError(f"seeds_histogram_bins and seeds_iterations must be >= 1, got {seeds_histogram_bins} "
                             f"and {seeds_iterations}")
        self.size, self.num_segments, self.superpixel_method = size, num_segments, superpixel_method
        self.resize_size, self.resample, self.superpixel_input = resize_size, resample, superpixel_input
        self.seeds_histogram_bins, self.seeds_iterations = seeds_histogram_bins, seeds_iterations
        self.image_mean = list(IMAGENET_DEFAULT_MEAN if image_mean is None else image_mean)
        self.image_std = list(IMAGENET_DEFAULT_STD if image_std is None else image_std)
        super().__init__(**kwargs)

    def crop(self, image: PIL.Image.Image) -> np.ndarray:
        """(size, size, 3) uint8: shortest edge resized to `resize_size`, then the centre crop, with torchvision's
        rounding (`Resize`: the long edge truncated; `CenterCrop`: offsets rounded half to even)."""
        width, height = image.size
        short, long = sorted((width, height))
        long = int(self.resize_size * long / short)
        size = (self.resize_size, long) if width <= height else (long, self.resize_size)
        resized = image.resize(size, RESAMPLING[self.resample]) if size != image.size else image
        left, top = round((resized.width - self.size) / 2), round((resized.height - self.size) / 2)
        return np.asarray(resized.crop((left, top, left + self.size, top + self.size)).convert("RGB"))

    def superpixel_image(self, pixels: np.ndarray, crop: np.ndarray) -> np.ndarray:
        """The (H, W, 3) uint8 image superpixels are computed on (see `superpixel_input`)."""
        if self.superpixel_input == "crop":
            return crop
        restored = pixels.transpose(1, 2, 0) * tuple(self.image_std) + tuple(self.image_mean)  # float64, as CAST
        return (restored * 255).astype(np.uint8)

    def __call__(self, images, return_tensors: str | None = "pt", **kwargs) -> BatchFeature:
        return self.preprocess(images, return_tensors=return_tensors, **kwargs)

    def preprocess(self, images, return_tensors: str | None = "pt", superpixels=None, **kwargs) -> BatchFeature:
        """`pixel_values` and `superpixels` of one image or a list of them (anything `to_rgb_images` takes).

        `superpixels`: the images' ids computed before by this processor (one (size, size) integer array each, e.g.
        a dataset column made once with `hf_longclip.data.superpixels.with_superpixels`), taken instead of being
        computed again; their shape and ids (0 <= id < num_segments) are checked."""
        if kwargs:
            raise TypeError(f"unexpected arguments {sorted(kwargs)}")
        crops = [self.crop(image) for image in to_rgb_images(images)]
        mean, std = np.asarray(self.image_mean, np.float32), np.asarray(self.image_std, np.float32)
        pixels = [((crop.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1) for crop in crops]
        if superpixels is None:
            options = ({"histogram_bins": self.seeds_histogram_bins, "iterations": self.seeds_iterations}
                       if self.superpixel_method == "seeds" else {})
            labels = [compute_superpixels(self.superpixel_image(pixel, crop), self.num_segments,
                                          self.superpixel_method, **options) for pixel, crop in zip(pixels, crops)]
        else:
            labels = self._given_superpixels(superpixels, len(crops))
        return BatchFeature({"pixel_values": np.stack(pixels), "superpixels": np.stack(labels)},
                            tensor_type=return_tensors)

    def _given_superpixels(self, superpixels, count: int) -> list[np.ndarray]:
        """Precomputed superpixel ids, checked against the images and this processor's crop and segment count."""
        labels = [np.asarray(ids) for ids in ([superpixels] if np.ndim(superpixels) == 2 else superpixels)]
        if len(labels) != count:
            raise ValueError(f"got superpixels for {len(labels)} images and {count} images")
        for index, ids in enumerate(labels):
            if ids.shape != (self.size, self.size) or not np.issubdtype(ids.dtype, np.integer):
                raise ValueError(f"superpixels of image {index} must be integer ids of shape ({self.size}, "
                                 f"{self.size}) (this processor's crop), got {ids.dtype} {ids.shape}")
            if ids.min() < 0 or ids.max() >= self.num_segments:
                raise ValueError(f"superpixels of image {index} hold ids outside [0, {self.num_segments}) "
                                 f"(num_segments): {ids.min()}..{ids.max()}")
        return [ids.astype(np.int64) for ids in labels]


__all__ = ["SUPERPIXEL_METHODS", "CASTImageProcessor", "compute_superpixels", "relabel_contiguous",
           "seeds_superpixels", "slic_superpixels"]
