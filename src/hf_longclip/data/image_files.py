"""Opening an image file robustly: the one place every loader of the library reads an image file through (`hf-longclip
shard`, shards streamed to training, `hf-longclip eval`'s benchmark loaders, the demo's folder index).

    image = open_image("photo.jpg")          # 8-bit RGB PIL image, or UnreadableImage with a named reason
    reason = check_image("photo.jpg")        # None, or the reason

What an image file can be in a scrape, and what is done with it:

* EXIF orientation: applied (`PIL.ImageOps.exif_transpose`), the image as a viewer shows it; a malformed EXIF block
  keeps the stored orientation.
* An animated GIF / WebP / PNG: its first frame.
* Any mode (16-bit, palette, grey, CMYK, transparency): `modeling_common.images.to_rgb_images`, as the processors.
* More pixels than `max_image_pixels()` (default Pillow's own limit, 89,478,485 = 9459 x 9459; the environment
  variable `HF_LONGCLIP_MAX_IMAGE_PIXELS`, an integer or `none`, or `--max-image-pixels` of the commands, which sets
  it, changes it for this process and the processes it starts): refused *before* it is decoded, reason `too large`.
  Pillow itself only warns between its limit and twice it and raises `DecompressionBombError` above; both end
  here as `too large`.
* Undecodable (`UnreadableImage.reason`): `missing file` (also a broken link), `not a file` (a folder), `empty
  file` (zero bytes), `not an image` (a text file named .jpg), `truncated` (a download cut short), `too large`,
  `undecodable` (anything else PIL refuses).

What a loader does with an undecodable sample is one policy (`bad_sample_policy`): `skip` (the default; the sample
is left out, logged, and counted by reason: `SkippedSamples`) or `error` (stop, naming the file and the sample id);
the environment variable `HF_LONGCLIP_BAD_SAMPLES`, or `--bad-samples` of the commands, picks it. Why `skip` is the
default: docs/data.md.
"""

from __future__ import annotations

import io
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import PIL.Image
import PIL.ImageOps
from PIL import UnidentifiedImageError

from ..modeling_common.images import to_rgb_images

logger = logging.getLogger(__name__)

MAX_PIXELS_ENV = "HF_LONGCLIP_MAX_IMAGE_PIXELS"
POLICY_ENV = "HF_LONGCLIP_BAD_SAMPLES"
DEFAULT_MAX_IMAGE_PIXELS = 89_478_485  # Pillow's MAX_IMAGE_PIXELS (1024 * 1024 * 1024 // 4 // 3)
POLICIES = ("skip", "error")
DEFAULT_POLICY = "skip"
EXAMPLES_KEPT = 100  # skipped samples listed by id in a manifest or report (all are counted)

# the named reasons of an undecodable sample
MISSING, NOT_A_FILE, EMPTY, NOT_AN_IMAGE, TRUNCATED, TOO_LARGE, UNDECODABLE = (
    "missing file", "not a file", "empty file", "not an image", "truncated", "too large", "undecodable")
NO_CAPTION, EMPTY_CAPTION = "no caption", "empty caption"


class UnreadableImage(ValueError):
    """An image file that does not decode: `reason` (one of the named reasons above), `source` (the file, when it is
    one) and `detail` (what PIL said)."""

    def __init__(self, reason: str, source: str | None = None, detail: str = ""):
        self.reason, self.source, self.detail = reason, source, detail
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{reason}" + (f" ({detail})" if detail and detail != reason else ""))


def _parse_pixels(value: str | int | None) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "0", "off", "")):
        return None
    try:
        pixels = int(value)
    except ValueError:
        raise ValueError(f"{MAX_PIXELS_ENV} / --max-image-pixels must be a positive integer or 'none', got "
                         f"{value!r}") from None
    if pixels < 0:
        raise ValueError(f"{MAX_PIXELS_ENV} / --max-image-pixels must be a positive integer or 'none', got {value!r}")
    return pixels or None


def max_image_pixels() -> int | None:
    """The most pixels an image may have (None: no limit): `HF_LONGCLIP_MAX_IMAGE_PIXELS`, else Pillow's default."""
    return _parse_pixels(os.environ.get(MAX_PIXELS_ENV, str(DEFAULT_MAX_IMAGE_PIXELS)))


def set_max_image_pixels(value: str | int | None) -> None:
    """Set the pixel limit for this process and the processes it starts (data-loader workers, shard writers): an
    integer, or None / "none" for no limit."""
    pixels = _parse_pixels(value)
    os.environ[MAX_PIXELS_ENV] = str(pixels) if pixels else "none"


def bad_sample_policy(policy: str | None = None) -> str:
    """`policy` if given, else `HF_LONGCLIP_BAD_SAMPLES`, else "skip"; checked."""
    policy = policy or os.environ.get(POLICY_ENV) or DEFAULT_POLICY
    if policy not in POLICIES:
        raise ValueError(f"the bad-sample policy ({POLICY_ENV} / --bad-samples) must be one of {POLICIES}, got "
                         f"{policy!r}")
    return policy


def set_bad_sample_policy(policy: str) -> None:
    """Set the policy for this process and the processes it starts."""
    os.environ[POLICY_ENV] = bad_sample_policy(policy)


def _allow_in_pillow(limit: int | None) -> None:
    """Let Pillow open what our limit allows: its own guard (an error above twice `PIL.Image.MAX_IMAGE_PIXELS`) is
    only ever raised to ours, never lowered (the same value from every thread, so no race)."""
    current = PIL.Image.MAX_IMAGE_PIXELS
    if current is not None and (limit is None or limit > current):
        PIL.Image.MAX_IMAGE_PIXELS = limit


def _reason(error: BaseException) -> str:
    if isinstance(error, PIL.Image.DecompressionBombError):
        return TOO_LARGE
    if isinstance(error, UnidentifiedImageError):
        return NOT_AN_IMAGE
    if isinstance(error, EOFError) or "truncated" in str(error).lower():
        return TRUNCATED
    return UNDECODABLE


def _open(source: str | os.PathLike | bytes) -> tuple[bytes | None, str]:
    """(the bytes to decode or None to read the path, the name to report)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if not len(source):
            raise UnreadableImage(EMPTY)
        return bytes(source), ""
    path = Path(source)
    name = str(path)
    if not path.exists():
        raise UnreadableImage(MISSING, name, "a broken link" if path.is_symlink() else "no such file")
    if not path.is_file():
        raise UnreadableImage(NOT_A_FILE, name, "a folder" if path.is_dir() else "not a regular file")
    if path.stat().st_size == 0:
        raise UnreadableImage(EMPTY, name, "0 bytes")
    return None, name


def decode_image(source: str | os.PathLike | bytes) -> tuple[PIL.Image.Image, str | None]:
    """(8-bit RGB image, its file format) of an image file (a path or its bytes), by the rules of this module's
    docstring; UnreadableImage with the named reason otherwise."""
    data, name = _open(source)
    limit = max_image_pixels()
    _allow_in_pillow(limit)
    try:
        with PIL.Image.open(io.BytesIO(data) if data is not None else name) as image:
            image_format = image.format
            width, height = image.size
            if limit is not None and width * height > limit:
                raise UnreadableImage(TOO_LARGE, name or None, f"{width} x {height} = {width * height:,} pixels, over "
                                      f"the limit of {limit:,} ({MAX_PIXELS_ENV} or --max-image-pixels raises it)")
            image.load()  # the first frame of an animation; a truncated file fails here
            try:
                oriented = PIL.ImageOps.exif_transpose(image)
            except Exception as error:  # noqa: BLE001 (a malformed EXIF block: keep the stored orientation)
                logger.debug("%s: EXIF orientation not applied (%s)", name or "image", error)
                oriented = image
            rgb = to_rgb_images(oriented)[0]
            if rgb is image:  # still backed by the file being closed
                rgb = image.copy()
    except UnreadableImage:
        raise
    except FileNotFoundError as error:  # removed since it was checked
        raise UnreadableImage(MISSING, name or None, str(error)) from None
    except (OSError, ValueError, SyntaxError, EOFError, TypeError, IndexError, KeyError,
            PIL.Image.DecompressionBombError) as error:  # what PIL raises for bad data
        detail = " ".join(str(error).split()) or type(error).__name__
        if name and name in detail:  # "cannot identify image file 'x.jpg'": the file is named already
            detail = detail.replace(f" {name!r}", "").replace(f" {name}", "")
        raise UnreadableImage(_reason(error), name or None, detail) from None
    return rgb, image_format


def open_image(source: str | os.PathLike | bytes) -> PIL.Image.Image:
    """An image file (a path or its bytes) as an 8-bit RGB PIL image, oriented by its EXIF tag, its first frame if
    animated; UnreadableImage (a ValueError) with a named `reason` when it cannot be (see the module docstring)."""
    return decode_image(source)[0]


def check_image(source: str | os.PathLike | bytes) -> str | None:
    """None if the image file decodes (`open_image`), else the reason it does not (e.g. "truncated")."""
    try:
        decode_image(source)
    except UnreadableImage as error:
        return error.reason
    return None


@dataclass
class SkippedSamples:
    """The samples a loader left out under the `skip` policy, counted by reason, the first `EXAMPLES_KEPT` listed
    (sample id, file, reason, detail); `add` raises instead under the `error` policy, naming the file and id."""

    policy: str = field(default_factory=bad_sample_policy)
    what: str = "sample"
    reasons: Counter = field(default_factory=Counter)
    examples: list[dict] = field(default_factory=list)
    log: logging.Logger = field(default=logger, repr=False)  # where each skip is logged

    def __post_init__(self):
        self.policy = bad_sample_policy(self.policy)

    @property
    def count(self) -> int:
        return sum(self.reasons.values())

    def add(self, sample_id, reason: str, file: str | None = None, detail: str = "") -> None:
        """Count one undecodable sample (or raise a ValueError naming it, under the `error` policy)."""
        where = f"{file}: " if file else ""
        message = f"{where}{self.what} {sample_id}: {reason}" + (f" ({detail})" if detail and detail != reason else "")
        if self.policy == "error":
            raise ValueError(f"{message}; pass --bad-samples skip (or set {POLICY_ENV}=skip) to skip and count such "
                             f"samples instead")
        self.log.warning("skipping %s", message)
        self.reasons[reason] += 1
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append({"id": str(sample_id), "file": file, "reason": reason, "detail": detail})

    def add_error(self, sample_id, error: UnreadableImage) -> None:
        self.add(sample_id, error.reason, error.source, error.detail)

    def merge(self, other: SkippedSamples | dict) -> None:
        summary = other.summary() if isinstance(other, SkippedSamples) else other
        self.reasons.update(summary.get("by_reason", {}))
        room = EXAMPLES_KEPT - len(self.examples)
        self.examples.extend(summary.get("examples", [])[:max(0, room)])

    def summary(self) -> dict:
        """{"count", "by_reason", "examples"}: what a manifest or report records."""
        return {"count": self.count, "by_reason": dict(sorted(self.reasons.items())), "examples": list(self.examples)}

    def describe(self) -> str:
        """One line: "3 skipped (truncated 2, empty file 1)"."""
        if not self.count:
            return f"no {self.what} skipped"
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(self.reasons.items()))
        return f"{self.count} {self.what}(s) skipped ({reasons})"


__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "MAX_PIXELS_ENV",
    "POLICIES",
    "POLICY_ENV",
    "SkippedSamples",
    "UnreadableImage",
    "bad_sample_policy",
    "check_image",
    "decode_image",
    "max_image_pixels",
    "open_image",
    "set_bad_sample_policy",
    "set_max_image_pixels",
]
