"""`hf-longclip demo --write-space DIR`: a Hugging Face Space (app.py, requirements.txt, README.md with the Space's
metadata) that runs the same app with Hub model ids, over a copied image folder or a benchmark split."""

from __future__ import annotations

import shutil
from pathlib import Path

from .index import list_images

DEFAULT_REQUIREMENT = "hf-longclip[demo]"

APP = '''"""The hf-longclip demo as a Hugging Face Space (written by `hf-longclip demo --write-space`)."""

from hf_longclip.demo.app import run_demo

MODELS = {models!r}

# A Space serves on all interfaces of its container, behind the Hub's proxy, on the port it sets.
run_demo(MODELS, images={images!r}, dataset={dataset!r}, data_dir={data_dir!r}, trust_remote_code={trust!r},
         host="0.0.0.0", port=7860, cache_dir="cache")
'''

README = """---
title: {title}
emoji: 🔎
colorFrom: indigo
colorTo: green
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
models:
{model_list}
---

# {title}

Type a long, detailed caption: each model's best images, side by side, and how the similarity with its top image
grows sentence by sentence. Models: {model_names}. Images: {source}.
"""


def write_space(output_dir: str | Path, models: list[str], images: str | None = None, dataset: str | None = None,
                data_dir: str | None = None, trust_remote_code: bool = False,
                requirement: str = DEFAULT_REQUIREMENT) -> list[Path]:
    """Write the Space into `output_dir` (an image folder is copied into `output_dir/images/`); the paths written.
    `models` must be Hub ids (a Space cannot read this machine's folders)."""
    from importlib.metadata import version

    local = [name for name in models if Path(name).expanduser().exists()]
    if local:
        raise ValueError(f"a Space loads its models from the Hub: {', '.join(local)} is a local path; push it "
                         f"(`--push_to_hub` of the training scripts) and pass its Hub id")
    if not models:
        raise ValueError("--write-space needs at least one --model Hub id")
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    written = []
    if images is not None:
        source = Path(images).expanduser()
        for path in list_images(source):
            target = output / "images" / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        images, dataset, data_dir = "images", None, None
        written.append(output / "images")
    app = output / "app.py"
    app.write_text(APP.format(models=list(models), images=images, dataset=dataset, data_dir=data_dir,
                              trust=trust_remote_code))
    requirements = output / "requirements.txt"
    requirements.write_text(f"{requirement}\ngradio=={version('gradio')}\n")
    readme = output / "README.md"
    readme.write_text(README.format(
        title="hf-longclip long-caption search", gradio_version=version("gradio"),
        model_list="\n".join(f"  - {name}" for name in models), model_names=", ".join(f"`{name}`" for name in models),
        source="the images in `images/`" if images else f"the {dataset} benchmark's images"))
    return [app, requirements, readme, *written]
