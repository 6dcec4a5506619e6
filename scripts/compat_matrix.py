"""Which transformers releases load hf-longclip checkpoints, as a user without hf-longclip loads them.

    python scripts/compat_matrix.py                      # every 5.x minor and the last 4.x, every model
    python scripts/compat_matrix.py --releases 4.57.6 5.0.0 --models himo_clip fcast

With hf-longclip installed, the script saves a tiny random checkpoint of every model class with its processor
(`save_pretrained`: weights, configuration and the remote-code bundle), with the inputs and the outputs this process
computes. Then, for each release, it builds an environment from the package registry (one virtual environment with
this torch, Pillow and numpy; per release a folder holding that transformers and its dependencies; OpenCV and
scikit-image in a folder of their own) and runs this same file with `--load` there, where hf-longclip is absent:
`AutoModel` / `AutoProcessor.from_pretrained(trust_remote_code=True)` (and again with `device_map="cpu"`), the
processor's outputs and the model's outputs against the saving process's (1e-5), the non-persistent buffers (rotary
tables, position ids) against a model built from the configuration, a checkpoint missing weights (finite, equal on
two loads under one seed), and text-only processing of the CAST-based models without OpenCV. It writes the table as
JSON (`--output`) and Markdown (`--markdown`); docs/compatibility.md holds the last run.

The loading half (`--load`) imports only the standard library, numpy, torch, transformers and Pillow.
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

OUTPUT_ATOL = 1e-5
CAPTIONS = [
    "A red circle is on the left. A blue square is at the top. The ground is plain. A green star is small.",
    "A yellow triangle is large. A red square is on the right. The sky is grey. A blue circle is tiny.",
]
# model name -> (what it is, whether its images need superpixels: OpenCV / scikit-image)
MODELS = {
    "himo_clip": ("HiMoCLIPModel", False),
    "onelip": ("OneLIPModel", False),
    "onelip_pretraining": ("OneLIPForPreTraining", False),
    "tulip": ("OneLIPModel, plain RoPE (a converted TULIP)", False),
    "ditm": ("DITMModel", False),
    "cast": ("CASTVisionModel", True),
    "cast_classifier": ("CASTForImageClassification", True),
    "fcast": ("FCASTModel", True),
    "flair": ("FCASTModel, ViT row (a converted FLAIR)", False),
}
CAST_EXTRA = ["opencv-contrib-python-headless", "scikit-image"]
TEXT_ENCODER_FOLDERS = ("himo_clip",)  # also saved as the plain CLIPTextModel folder of --text-encoder-only


# ---------------------------------------------------------------------------------------------------------------------
# Saving, with hf-longclip (this process)


def _tiny_checkpoint(name: str):
    """(model, processor) of a tiny random model of `name`."""
    import torch
    from transformers import CLIPImageProcessor

    import hf_longclip as hl
    from hf_longclip.data.tokenizer import train_scene_tokenizer

    tokenizer = train_scene_tokenizer(CAPTIONS, model_max_length=77)
    special = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    width = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2)
    vit = dict(width, image_size=32, patch_size=8)
    clip_images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    cast_images = hl.CASTImageProcessor(size=32, num_segments=16)
    cast_tower = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32, num_segments=16,
                      depths=[1, 1, 1], num_clusters=[6, 3])
    torch.manual_seed(0)

    if name in ("himo_clip", "ditm"):
        config_class, model_class, processor_class = {
            "himo_clip": (hl.HiMoCLIPConfig, hl.HiMoCLIPModel, hl.HiMoCLIPProcessor),
            "ditm": (hl.DITMConfig, hl.DITMModel, hl.DITMProcessor)}[name]
        config = config_class(text_config=dict(width, **special, max_position_embeddings=248), vision_config=vit,
                              projection_dim=16)
        return model_class(config), processor_class(clip_images, tokenizer, max_length=248)
    if name in ("onelip", "onelip_pretraining", "tulip"):
        text = dict(width, **special, max_position_embeddings=248, rope_ntk_scaling=name != "tulip")
        config = hl.OneLIPConfig(text_config=text, vision_config=vit, projection_dim=16)
        processor = hl.OneLIPProcessor(clip_images, tokenizer, max_length=248)
        return (hl.OneLIPForPreTraining if name == "onelip_pretraining" else hl.OneLIPModel)(config), processor
    if name in ("cast", "cast_classifier"):
        num_labels = {"num_labels": 5} if name == "cast_classifier" else {}
        model_class = hl.CASTForImageClassification if num_labels else hl.CASTVisionModel
        return model_class(hl.CASTVisionConfig(**cast_tower, **num_labels)), cast_images
    if name in ("fcast", "flair"):
        hierarchical = name == "fcast"
        text = dict(width, **special, max_position_embeddings=16, num_stage2_layers=int(hierarchical),
                    num_chunks=4 if hierarchical else 1)
        config = hl.FCASTConfig(text_config=text, vision_config=cast_tower if hierarchical else vit, projection_dim=16,
                                pool_heads=2, vision_backbone="cast" if hierarchical else "vit",
                                grounding_stage=1 if hierarchical else 0)
        processor = hl.FCASTProcessor(cast_images if hierarchical else clip_images, tokenizer, max_length=16,
                                      num_chunks=4 if hierarchical else 1, needs_superpixels=hierarchical)
        return hl.FCASTModel(config), processor
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def save_checkpoints(root: Path, names: list[str]) -> None:
    """Each of `names` saved under `root/<name>` with `images/`, `captions.json` and `reference.safetensors` (the
    processor's and the model's outputs in this process)."""
    import numpy as np
    import torch
    from PIL import Image
    from safetensors.torch import save_file

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in CAPTIONS]
    for name in names:
        folder = root / name
        model, processor = _tiny_checkpoint(name)
        model.eval().save_pretrained(folder)
        processor.save_pretrained(folder)
        for index, image in enumerate(images):
            image.save(folder / f"image{index}.png")
        (folder / "captions.json").write_text(json.dumps(CAPTIONS))
        inputs = _process(processor, CAPTIONS, images)
        with torch.no_grad():
            outputs = _call_outputs(name, model, inputs)
        if name in TEXT_ENCODER_FOLDERS:  # `hf-longclip convert --text-encoder-only`: a plain CLIPTextModel folder
            from hf_longclip.integrations.diffusion import save_text_encoder

            save_text_encoder(model, processor, folder / "text_encoder")
            with torch.no_grad():
                outputs["text_encoder"] = model.get_text_features(input_ids=inputs["input_ids"]).last_hidden_state
        tensors = {f"input.{k}": v for k, v in inputs.items()} | {f"output.{k}": v for k, v in outputs.items()}
        save_file({k: v.contiguous() for k, v in tensors.items()}, folder / "reference.safetensors")
        (folder / "call.json").write_text(json.dumps({"name": name, "outputs": sorted(outputs)}))


def _process(processor, captions, images) -> dict:
    """The processor's tensors for `captions` and `images` (images only for an image processor)."""
    if hasattr(processor, "tokenizer"):
        return dict(processor(text=captions, images=images, return_tensors="pt"))
    return dict(processor(images=images, return_tensors="pt"))


# ---------------------------------------------------------------------------------------------------------------------
# Loading, without hf-longclip (run with --load in a release's environment)


def _call_outputs(name: str, model, inputs: dict) -> dict:
    """The outputs compared: saved by `save_checkpoints` (the library's model), recomputed by the loaded model (the
    checkpoint's own code)."""
    if name == "onelip_pretraining":
        out = model(**inputs, trim_top_k=4)
        return {"text_embeds": out.text_embeds, "image_embeds": out.image_embeds,
                "refined_text_states": out.refined_text_states}
    if name == "cast":
        out = model(**inputs)
        return {"pooler_output": out.pooler_output, "last_hidden_state": out.last_hidden_state}
    if name == "cast_classifier":
        return {"logits": model(**inputs).logits}
    out = model(**inputs, return_loss=True)
    return {"logits_per_image": out.logits_per_image, "text_embeds": out.text_embeds,
            "image_embeds": out.image_embeds, "loss": out.loss}


def _max_difference(expected: dict, actual: dict, what: str) -> float:
    import torch

    worst = 0.0
    for key, reference in expected.items():
        if key not in actual:
            raise AssertionError(f"{what} lacks {key}")
        value = torch.as_tensor(actual[key])
        if value.shape != reference.shape:
            raise AssertionError(f"{what} {key}: shape {tuple(value.shape)}, expected {tuple(reference.shape)}")
        difference = (value.double() - reference.double()).abs().max().item() if value.numel() else 0.0
        if not difference <= OUTPUT_ATOL:
            raise AssertionError(f"{what} {key} differs by {difference:.3g} (> {OUTPUT_ATOL})")
        worst = max(worst, difference)
    return worst


def _check_buffers(model, fresh) -> None:
    """Every non-persistent buffer (rotary tables, position ids) finite and equal to a model built from the config."""
    import torch

    persistent = set(model.state_dict())
    fresh_buffers = dict(fresh.named_buffers())
    for key, buffer in model.named_buffers():
        if key in persistent:
            continue
        if buffer.is_floating_point() and not torch.isfinite(buffer).all():
            raise AssertionError(f"buffer {key} is not finite after loading")
        if not torch.equal(buffer, fresh_buffers[key]):
            raise AssertionError(f"buffer {key} differs from a fresh model's after loading")


def _check_missing_weights(folder: Path, auto_class, workdir: Path) -> None:
    """A checkpoint without the weights of one attention layer and of the logit scale loads finite, the same on two
    loads under one seed (initialised by the model's rule, not left as memory)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    target = workdir / f"{folder.name}-missing"
    shutil.copytree(folder, target, dirs_exist_ok=True)
    weights = load_file(target / "model.safetensors")
    dropped = [key for key in weights if re.search(r"(self_attn|attention|attn)\.(q_proj|qkv|in_proj)", key)][:2]
    if not dropped:
        dropped = [next(key for key in weights if key.endswith("weight"))]
    save_file({k: v for k, v in weights.items() if k not in dropped}, target / "model.safetensors",
              metadata={"format": "pt"})
    loads = []
    for _ in range(2):
        torch.manual_seed(0)
        loads.append(auto_class.from_pretrained(target, trust_remote_code=True).state_dict())
    for key in dropped:
        if not torch.isfinite(loads[0][key]).all():
            raise AssertionError(f"missing weight {key} is not finite after loading")
        if not torch.equal(loads[0][key], loads[1][key]):
            raise AssertionError(f"missing weight {key} differs between two loads under one seed")
        if loads[0][key].float().std() == 0 and key.endswith("weight") and loads[0][key].dim() > 1:
            raise AssertionError(f"missing weight {key} was not drawn (constant)")


def load_checkpoint(folder: Path, with_images: bool, workdir: Path) -> dict:
    """Load `folder` as a user would; returns {"status", "max_difference", "checks"}; raises on the first failure."""
    import torch
    from PIL import Image
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel, AutoProcessor

    name = json.loads((folder / "call.json").read_text())["name"]
    captions = json.loads((folder / "captions.json").read_text())
    reference = load_file(folder / "reference.safetensors")
    expected_inputs = {k.removeprefix("input."): v for k, v in reference.items() if k.startswith("input.")}
    expected_outputs = {k.removeprefix("output."): v for k, v in reference.items() if k.startswith("output.")}
    text_encoder_states = expected_outputs.pop("text_encoder", None)
    auto_class = AutoModel
    if name == "onelip_pretraining":
        from transformers import AutoModelForPreTraining as auto_class
    elif name == "cast_classifier":
        from transformers import AutoModelForImageClassification as auto_class

    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    checks = ["processor loads"]
    if hasattr(processor, "tokenizer"):  # text alone: no OpenCV or scikit-image needed
        text_inputs = processor(text=captions, return_tensors="pt")
        _max_difference({k: v for k, v in expected_inputs.items() if k in ("input_ids", "attention_mask")},
                        text_inputs, "text inputs")
        checks.append("text processed" if _importable("cv2") else "text processed without OpenCV")
    model = auto_class.from_pretrained(folder, trust_remote_code=True).eval()
    fresh = auto_class.from_config(AutoConfig.from_pretrained(folder, trust_remote_code=True), trust_remote_code=True)
    _check_buffers(model, fresh)
    checks.append("buffers equal a fresh model's")
    difference = None
    if with_images:
        images = [Image.open(folder / f"image{index}.png") for index in range(len(captions))]
        inputs = _process(processor, captions, images)
        _max_difference(expected_inputs, inputs, "processor outputs")
        with torch.no_grad():
            difference = _max_difference(expected_outputs, _call_outputs(name, model, inputs), "model outputs")
            mapped = auto_class.from_pretrained(folder, trust_remote_code=True, device_map="cpu").eval()
            _check_buffers(mapped, fresh)
            difference = max(difference, _max_difference(expected_outputs, _call_outputs(name, mapped, inputs),
                                                         "model outputs (device_map)"))
        checks += ["outputs equal", "device_map load equal"]
    if text_encoder_states is not None:
        from transformers import CLIPTextModel

        text_encoder = CLIPTextModel.from_pretrained(folder / "text_encoder").eval()  # no code of ours
        with torch.no_grad():
            states = text_encoder(input_ids=expected_inputs["input_ids"]).last_hidden_state
        _max_difference({"text_encoder": text_encoder_states}, {"text_encoder": states},
                        "the text encoder folder's CLIPTextModel")
        checks.append("text encoder folder loads as CLIPTextModel")
    _check_missing_weights(folder, auto_class, workdir)
    checks.append("missing weights initialised")
    return {"status": "pass", "max_difference": difference, "checks": checks}


def run_loads(root: Path, names: list[str], with_images_of_cast: bool) -> dict:
    """Each checkpoint under `root` loaded (`load_checkpoint`): name -> result, or the failure's first error."""
    import transformers

    if "hf_longclip" in sys.modules or _importable("hf_longclip"):
        raise SystemExit("hf_longclip is importable here: the loading half must run where it is not installed")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            needs_superpixels = MODELS[name][1]
            try:
                results[name] = load_checkpoint(root / name, with_images_of_cast or not needs_superpixels,
                                                Path(workdir))
            except Exception as error:  # the table records the first error of each model
                frames = traceback.extract_tb(error.__traceback__)
                where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
                results[name] = {"status": "fail", "error": f"{type(error).__name__}: {error}"[:400],
                                 "where": where}
    return {"transformers": transformers.__version__, "results": results}


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------------------------------------------------
# Environments and the table


def default_releases() -> list[str]:
    """The newest patch of 4.57 (the last 4.x) and of every 5.x minor, from the package registry."""
    listing = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True,
                             text=True, check=True).stdout
    versions = re.search(r"Available versions: (.*)", listing).group(1).split(", ")
    newest = {}
    for version in versions:
        parts = version.split(".")
        if not all(part.isdigit() for part in parts):
            continue
        major, minor = int(parts[0]), int(parts[1])
        if (major, minor) == (4, 57) or major == 5:
            newest.setdefault((major, minor), version)  # pip lists newest first
    return [newest[key] for key in sorted(newest)]


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args], check=True)


def base_environment(cache: Path) -> Path:
    """The Python of a virtual environment holding this torch, numpy and Pillow, and no transformers."""
    import torch

    python = cache / "base" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(cache / "base")], check=True)
        _pip(python, f"torch=={torch.__version__.split('+')[0]}", "numpy", "pillow")
    return python


def release_folder(python: Path, cache: Path, release: str) -> Path:
    """A folder holding transformers `release`, its dependencies and accelerate (for `device_map`), for PYTHONPATH."""
    folder = cache / f"transformers-{release}"
    if not (folder / ".complete").exists():
        _pip(python, "--target", str(folder), "--upgrade", f"transformers=={release}", "psutil")
        _pip(python, "--target", str(folder), "--no-deps", "accelerate")  # accelerate alone: torch is the base's
        (folder / ".complete").touch()
    return folder


def extra_folder(python: Path, cache: Path) -> Path:
    """A folder holding OpenCV and scikit-image (hf-longclip's `cast` extra), for PYTHONPATH."""
    folder = cache / "cast-extra"
    if not (folder / ".complete").exists():
        _pip(python, "--target", str(folder), *CAST_EXTRA)
        for shadowing in folder.glob("numpy*"):  # the base's numpy serves torch too
            subprocess.run(["rm", "-rf", str(shadowing)], check=True)
        (folder / ".complete").touch()
    return folder


def load_in_release(python: Path, folders: list[Path], root: Path, names: list[str], with_images: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHON"))}
    with tempfile.TemporaryDirectory() as home:
        env.update(PYTHONPATH=os.pathsep.join(map(str, folders)), HF_HUB_OFFLINE="1", HF_HOME=home,
                   TRANSFORMERS_VERBOSITY="error", PYTHONNOUSERSITE="1")
        command = [str(python), str(Path(__file__).resolve()), "--load", str(root), "--models", *names]
        if with_images:
            command.append("--with-cast-images")
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=home)
    if done.returncode:
        raise RuntimeError(f"the loading process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_matrix(releases: list[str], names: list[str], cache: Path, progress=print) -> dict:
    """Save every checkpoint once, then load them in each release's environment, with and without OpenCV."""
    cache.mkdir(parents=True, exist_ok=True)
    python = base_environment(cache)
    extra = extra_folder(python, cache) if any(MODELS[name][1] for name in names) else None
    table = {}
    with tempfile.TemporaryDirectory() as checkpoints:
        save_checkpoints(Path(checkpoints), names)
        for release in releases:
            progress(f"transformers {release} ...")
            folder = release_folder(python, cache, release)
            without = load_in_release(python, [folder], Path(checkpoints), names, with_images=False)
            results = without["results"]
            if extra is not None:
                with_cast = load_in_release(python, [folder, extra], Path(checkpoints),
                                            [name for name in names if MODELS[name][1]], with_images=True)
                for name, result in with_cast["results"].items():  # a failure without OpenCV stands
                    if results[name]["status"] == "pass":
                        result["checks"] = list(dict.fromkeys(results[name]["checks"] + result.get("checks", [])))
                        results[name] = result
            table[release] = results
            progress("  " + ", ".join(f"{name} {result['status']}" for name, result in results.items()))
    return table


def provenance(command: list[str]) -> dict:
    import torch

    from hf_longclip.training.provenance import cpu_name

    return {"command": " ".join(command), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "cpu": cpu_name(), "torch": torch.__version__, "python": platform.python_version()}


def markdown(report: dict) -> str:
    names = list(next(iter(report["matrix"].values())))
    lines = ["| transformers | " + " | ".join(f"`{name}`" for name in names) + " |",
             "|---|" + "---|" * len(names)]
    for release, results in report["matrix"].items():
        cells = ["pass" if results[name]["status"] == "pass" else "**fail**" for name in names]
        lines.append(f"| {release} | " + " | ".join(cells) + " |")
    failures = [f"- {release}, `{name}`: {result['error']} ({result['where']})"
                for release, results in report["matrix"].items() for name, result in results.items()
                if result["status"] == "fail"]
    return "\n".join(lines + ([""] + failures if failures else [])) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", nargs="+", help="transformers releases (default: the last 4.x, every 5.x minor)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hf-longclip-compat",
                        help="where the environments are kept between runs")
    parser.add_argument("--output", type=Path, help="the JSON report")
    parser.add_argument("--markdown", type=Path, help="the Markdown table")
    parser.add_argument("--load", type=Path, help=argparse.SUPPRESS)  # the loading half, run in a release's env
    parser.add_argument("--with-cast-images", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load:
        print(json.dumps(run_loads(args.load, args.models, args.with_cast_images)))
        return
    releases = args.releases or default_releases()
    report = {"provenance": provenance(sys.argv), "matrix": run_matrix(releases, args.models, args.cache),
              "models": {name: what for name, (what, _) in MODELS.items() if name in args.models}}
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
