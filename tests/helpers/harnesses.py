"""What the tests of the field's harnesses (CLIP_benchmark, MTEB: tests/integrations/) share: a tiny checkpoint of
each dual-encoder class saved to a folder, an Urban1k folder in its release layout with long captions, and the
environment of a process that runs CLIP_benchmark's command line."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from helpers.builders import tiny_himo, tiny_processor
from helpers.fcast import CAPTIONS as SCENE_CAPTIONS
from helpers.tiny_models import TEXT_MODELS, tiny_model

PLACEHOLDERS = Path(__file__).parent / "placeholders"
SRC = Path(__file__).resolve().parents[2] / "src"
WORDS = "red blue green yellow circle square triangle cross left right top bottom small large".split()


def long_caption(index: int, length: int = 40) -> str:
    """A caption of `length` words (well over 77 tokens of the character tokenizer), seeded by `index`; captions of
    neighbouring indices share their first half and differ after it."""
    rng = np.random.default_rng(index)
    shared = np.random.default_rng(index // 2).choice(WORDS, length // 2)
    return " ".join([*shared, *rng.choice(WORDS, length - length // 2)]) + "."


def write_urban1k(root: Path, count: int, captions=None) -> Path:
    """Urban1k as Long-CLIP releases it (caption/<N>.txt, image/<N>.jpg), `count` random images and their captions
    (default `long_caption`)."""
    (root / "caption").mkdir(parents=True)
    (root / "image").mkdir()
    for index in range(count):
        pixels = np.random.default_rng(1000 + index).integers(0, 256, (40, 48, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"image/{index}.jpg", quality=95)
        caption = captions[index] if captions is not None else long_caption(index)
        (root / f"caption/{index}.txt").write_text(f"{caption}\n", encoding="utf-8")
    return root


def save_dual_encoder(name: str, path: Path) -> Path:
    """A tiny random checkpoint of `name` (a dual encoder's model folder, or clip: a HiMo-CLIP exported as a plain
    transformers CLIPModel of 248 positions) saved to `path`."""
    if name == "clip":  # HiMo-CLIP exported as a plain transformers CLIPModel (`hf-longclip export-clip`)
        from hf_longclip.models.himo_clip.export_clip import save_as_clip

        return save_as_clip(tiny_himo(seed=1), tiny_processor(), path)
    if name not in TEXT_MODELS:
        raise ValueError(f"{name!r} is not a dual encoder: {', '.join(TEXT_MODELS)} or clip")
    model, processor = tiny_model(name)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def scene_captions(count: int, length: int = 8) -> list[str]:
    """`count` distinct captions of `length` words for F-CAST's tiny tokenizer, which knows only its scene words
    (short enough for its 4 chunks)."""
    words = sorted({word.strip(".") for caption in SCENE_CAPTIONS for word in caption.split()})
    return [" ".join(np.random.default_rng(index).choice(words, length)) + "." for index in range(count)]


def torchvision_imports() -> bool:
    """Whether torchvision imports here (it does not beside the CPU build of torch 2.13: placeholders/)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    return subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True).returncode == 0


def clip_benchmark_env() -> dict:
    """The environment of a process running CLIP_benchmark's command line: this checkout's source first, offline,
    and the torchvision placeholders where torchvision does not import."""
    paths = [str(SRC)] + ([] if torchvision_imports() else [str(PLACEHOLDERS)])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    return env
