"""The demo tests' files: tiny checkpoints (HiMo-CLIP, F-CAST) and an image folder with one file PIL cannot read."""

from pathlib import Path

from helpers.builders import random_images, tiny_himo, tiny_processor
from helpers.fcast import tiny_fcast
from helpers.fcast import tiny_processor as tiny_fcast_processor

CAPTION = "A red circle is on the left. A blue square is at the top. The ground is plain. A green star is small."


def write_demo_files(root: Path) -> dict:
    """{"himo", "fcast": checkpoint folders, "images": 8 images and broken.png} under `root`."""
    tiny_himo().save_pretrained(root / "himo")
    tiny_processor().save_pretrained(root / "himo")
    tiny_fcast().save_pretrained(root / "fcast")
    tiny_fcast_processor().save_pretrained(root / "fcast")
    images = root / "images"
    images.mkdir()
    for i, image in enumerate(random_images(8)):
        image.save(images / f"image{i}.png")
    (images / "broken.png").write_bytes(b"this is no image")
    return {"himo": root / "himo", "fcast": root / "fcast", "images": images}


def image_paths(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("image*.png"))
