"""The Gradio app of `hf-longclip demo`: a search tab (a long caption in, each model's top-k images with their cosine
similarities side by side, and the similarity of each caption prefix, sentence by sentence as HiMo@K measures it, with
each model's top image) and, for F-CAST and FLAIR checkpoints, a grounding tab (the attention map of each sentence
over an image, F-CAST's Fig. 7 live). Needs the optional extra `hf-longclip[demo]`."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..evaluation.encoding import encode_texts, text_max_length
from ..evaluation.loading import load_model
from ..evaluation.tasks import prefix_scores
from ..modeling_common.optional import require
from ..modeling_common.text import split_sentences
from ..recipes.fcast.evaluation import sentence_attention
from .index import DEMO_PACKAGES, ImageIndex, build_index, example_captions, list_images, read_image

DEFAULT_TOP_K = 4
MAX_TOP_K = 32
MAX_FOLDER_CHOICES = 500  # images of the folder listed in the grounding tab (a 100k-image list would stall the page)


def require_gradio():
    """The gradio module; ImportError naming the extra `hf-longclip[demo]` where it, faiss or matplotlib (the other
    packages the demo uses) is missing, so that the demo stops before any model loads."""
    for module in ("faiss", "matplotlib", "gradio"):
        imported = require(module, "demo", DEMO_PACKAGES, "the demo")
    return imported


@dataclass
class DemoModel:
    """A loaded checkpoint of the demo and its index over the current image folder."""

    name: str
    model: torch.nn.Module
    processor: object
    index: ImageIndex | None = None

    @property
    def label(self) -> str:
        """The name shown: a checkpoint folder's own name, or the Hub id."""
        path = Path(self.name).expanduser()
        return path.name if path.is_dir() else self.name

    @property
    def grounds(self) -> bool:
        """Whether the model draws per-sentence attention maps (F-CAST and FLAIR: `get_grounding`)."""
        return hasattr(self.model, "get_grounding")

    def embed_texts(self, texts: list[str]) -> torch.Tensor:
        return encode_texts(self.model, self.processor, texts)


def load_demo_models(names: list[str], trust_remote_code: bool = False, device: str | None = None) -> list[DemoModel]:
    return [DemoModel(name, *load_model(name, device=device, trust_remote_code=trust_remote_code)) for name in names]


class Demo:
    """The app's state and actions, independent of gradio (each action returns a status line and its outputs)."""

    def __init__(self, models: list[DemoModel], cache_dir: str | Path, batch_size: int = 32):
        self.models, self.cache_dir, self.batch_size = models, Path(cache_dir), batch_size
        self.folder: Path | None = None

    def index_folder(self, folder: str) -> str:
        """Index `folder` under every model (cached embeddings reused); a status line, or the problem."""
        folder = str(folder or "").strip()
        if not folder:
            return "Type the path of an image folder first."
        try:
            list_images(folder)
            indexes = [build_index(entry.model, entry.processor, folder, self.cache_dir, self.batch_size)
                       for entry in self.models]
        except (OSError, ValueError) as error:
            return f"Cannot use this folder: {error}"
        for entry, index in zip(self.models, indexes):
            entry.index = index
        self.folder = Path(folder).expanduser()
        index = indexes[0]
        status = (f"{len(index.paths)} images of {self.folder} indexed ({sum(i.encoded for i in indexes)} embeddings "
                  f"computed, the rest from the cache).")
        if index.skipped:
            status += f" Skipped {_skipped_files(index)}."
        return status

    def search(self, caption: str, k: int = DEFAULT_TOP_K) -> tuple[str, list[list[tuple[str, str]]], list[dict]]:
        """(status, each model's top-`k` (image path, "name · score") best first, the prefix curve's points: one
        {"model", "sentences", "similarity"} per caption prefix and model, with the model's top image)."""
        caption = " ".join(str(caption or "").split())
        if not caption:
            return "Type a caption first: the search box is empty.", [[] for _ in self.models], []
        if self.folder is None:
            return "No image folder is indexed: pick one in the folder box above.", [[] for _ in self.models], []
        k = max(1, min(int(k), MAX_TOP_K))
        prefixes = [" ".join(sentences) for sentences in _prefix_sentences(caption)]
        galleries, curve, notes = [], [], []
        for entry in self.models:
            query = entry.embed_texts([caption])[0]
            scores, rows = entry.index.search(query, k)
            galleries.append([(str(entry.index.paths[row]), f"{entry.index.paths[row].name} · {score:.4f}")
                              for score, row in zip(scores, rows)])
            top = entry.index.embeddings[rows[0]][None]
            similarities = prefix_scores(top, [prefixes], entry.embed_texts)[0]
            curve += [{"model": entry.label, "sentences": i + 1, "similarity": value}
                      for i, value in enumerate(similarities)]
            tokens = len(entry.processor.tokenizer(caption)["input_ids"])
            limit = text_max_length(entry.processor, entry.model)
            if tokens > limit and getattr(entry.processor, "num_chunks", 1) == 1:  # F-CAST reads chunks of it
                notes.append(f"{entry.label} reads the first {limit} of its {tokens} tokens")
        status = f"{len(prefixes)} sentence(s)." + (f" Truncated: {'; '.join(notes)}." if notes else "")
        return status, galleries, curve

    def ground(self, model_name: str, image_path: str | None, caption: str) -> tuple[str, str | None]:
        """(status, path of a PNG with the image and one attention map per sentence of `caption`)."""
        entry = next((entry for entry in self.models if entry.name == model_name and entry.grounds), None)
        if entry is None:
            return "Pick an F-CAST or FLAIR checkpoint: only they draw attention maps.", None
        sentences = split_sentences(" ".join(str(caption or "").split()))
        if not sentences:
            return "Type a caption first: the caption box is empty.", None
        if not image_path:
            return "Upload an image or pick one of the folder's.", None
        try:
            image = read_image(Path(image_path))
        except (OSError, ValueError) as error:
            return f"Cannot use this image: {error}", None
        from ..recipes.fcast.plots import plot_attention_maps

        shown, maps = sentence_attention_maps(entry.model, entry.processor, image, sentences)
        path = Path(tempfile.mkdtemp(prefix="hf-longclip-demo-")) / "grounding.png"
        plot_attention_maps([(shown, [(sentence, heat, None) for sentence, heat in zip(sentences, maps)])], path,
                            f"{entry.label}: attention of each sentence over the image")
        return f"{len(sentences)} sentence(s) grounded.", str(path)


def prefix_figure(curve: list[dict]) -> str | None:
    """A PNG of `Demo.search`'s prefix curve (HiMo-CLIP Fig. 3's axes, one line per model), or None without points."""
    if not curve:
        return None
    from ..plots import plot_prefix_similarity

    lines: dict[str, list[float]] = {}
    for point in curve:
        lines.setdefault(point["model"], []).append(point["similarity"])
    path = Path(tempfile.mkdtemp(prefix="hf-longclip-demo-")) / "prefixes.png"
    return str(plot_prefix_similarity(lines, path, "each model's top image", "Similarity of each caption prefix"))


def _prefix_sentences(caption: str) -> list[list[str]]:
    """The cumulative sentence prefixes of `caption` (HiMo@K's prefixes, HiMo-CLIP Sec. 4.2)."""
    sentences = split_sentences(caption)
    return [sentences[:end] for end in range(1, len(sentences) + 1)]


@torch.no_grad()
def sentence_attention_maps(model, processor, image, sentences: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The image as the model sees it ((H, W, 3) uint8, its processor's pixels un-normalised) and the AttnPool
    attention of each sentence over its pixels (F-CAST Eq. 6, each (H, W) summing to 1), from `get_grounding`."""
    pixel_values, maps = sentence_attention(model, processor, image, sentences)
    image_processor = processor.image_processor
    mean = torch.tensor(image_processor.image_mean).view(3, 1, 1)
    std = torch.tensor(image_processor.image_std).view(3, 1, 1)
    shown = ((pixel_values * std + mean).clamp(0, 1).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    return shown, [heat.numpy() for heat in maps]


def build_app(demo: Demo, examples: list[str] = (), title: str = "hf-longclip: long captions, found and grounded"):
    """The gradio Blocks of `demo` (search tab; grounding tab when a model grounds)."""
    gr = require_gradio()

    def search(caption, k):
        status, galleries, curve = demo.search(caption, k)
        return status, *galleries, prefix_figure(curve)

    def index_folder(folder, progress=gr.Progress(track_tqdm=True)):
        status = demo.index_folder(folder)
        return status, gr.update(choices=_folder_choices(demo))

    with gr.Blocks(title=title) as app:
        gr.Markdown(f"## {title}\nModels: " + ", ".join(f"`{entry.name}`" for entry in demo.models))
        with gr.Row():
            folder = gr.Textbox(value=str(demo.folder or ""), label="Image folder", scale=4)
            index_button = gr.Button("Index folder", scale=1)
        folder_status = gr.Markdown(_folder_status(demo))
        with gr.Tab("Search"):
            with gr.Row():
                caption = gr.Textbox(label="Long caption", lines=4, scale=4,
                                     placeholder="A detailed description, several sentences long")
                with gr.Column(scale=1):
                    k = gr.Slider(1, MAX_TOP_K, value=DEFAULT_TOP_K, step=1, label="top-k")
                    search_button = gr.Button("Search", variant="primary")
            search_status = gr.Markdown()
            with gr.Row():
                galleries = [gr.Gallery(label=f"{entry.label} (cosine similarity)", columns=4, height=260,
                                        object_fit="contain")
                             for entry in demo.models]
            curve = gr.Image(label="Similarity of each caption prefix with the model's top image", type="filepath",
                             height=320, show_label=True)
            if examples:
                gr.Examples([[text] for text in examples], inputs=[caption], label="Captions of the folder")
        search_outputs = [search_status, *galleries, curve]
        search_button.click(search, [caption, k], search_outputs, api_name="search")
        caption.submit(search, [caption, k], search_outputs, api_name=False)
        grounding = [(entry.label, entry.name) for entry in demo.models if entry.grounds]
        with gr.Tab("Grounding"):
            if not grounding:
                gr.Markdown("Grounding draws the attention of each sentence over an image: it needs an F-CAST or "
                            "FLAIR checkpoint (`--model`), and none of these models is one.")
            model_choice = gr.Dropdown(grounding, value=grounding[0][1] if grounding else None, label="Model",
                                       visible=bool(grounding))
            with gr.Row(visible=bool(grounding)):
                folder_image = gr.Dropdown(_folder_choices(demo), label="An image of the folder", scale=2)
                upload = gr.File(label="... or upload one", file_types=["image"], scale=2)
            ground_caption = gr.Textbox(label="Caption (one attention map per sentence)", lines=3,
                                        visible=bool(grounding))
            ground_button = gr.Button("Ground", variant="primary", visible=bool(grounding))
            ground_status = gr.Markdown()
            ground_figure = gr.Image(label="Attention per sentence", type="filepath", visible=bool(grounding))

        def ground(model_name, chosen, uploaded, text):
            return demo.ground(model_name, uploaded or chosen, text)

        ground_button.click(ground, [model_choice, folder_image, upload, ground_caption],
                            [ground_status, ground_figure], api_name="ground")
        index_button.click(index_folder, [folder], [folder_status, folder_image], api_name="index_folder")
    return app


def _folder_choices(demo: Demo) -> list[tuple[str, str]]:
    index = demo.models[0].index if demo.models else None
    paths = [] if index is None else index.paths[:MAX_FOLDER_CHOICES]
    return [(path.relative_to(index.root).as_posix(), str(path)) for path in paths]


def _folder_status(demo: Demo) -> str:
    index = demo.models[0].index if demo.models else None
    if index is None:
        return "No folder indexed yet."
    skipped = f"; skipped {_skipped_files(index)}" if index.skipped else ""
    return f"{len(index.paths)} images of {index.root} indexed{skipped}."


def _skipped_files(index) -> str:
    """"3 file(s) that cannot be read (truncated 2, empty file 1): a.jpg, b.png, ..."."""
    reasons = getattr(index, "skip_reasons", {})
    counts = {}
    for name in index.skipped:
        counts[reasons.get(name, "unreadable")] = counts.get(reasons.get(name, "unreadable"), 0) + 1
    by_reason = ", ".join(f"{reason} {count}" for reason, count in sorted(counts.items()))
    return (f"{len(index.skipped)} file(s) that cannot be read ({by_reason}): {', '.join(index.skipped[:5])}"
            + (" ..." if len(index.skipped) > 5 else ""))


MAIN_JOB_OUTPUT = Path("outputs/himo")


def main_job_checkpoints(output_dir: Path = MAIN_JOB_OUTPUT) -> list[str]:
    """The checkpoints `examples/train_himo.py` wrote under `output_dir` (its CLIP-77, CLIP-248 and HiMo-CLIP, each
    a folder with a config.json), by name; ValueError saying what to pass when there is none."""
    found = sorted((path for path in Path(output_dir).glob("*/config.json")), key=lambda path: path.parent.name)
    if not found:
        raise ValueError(f"no --model given and no checkpoints under {output_dir}/ (`accelerate launch "
                         f"examples/train_himo.py` writes them): pass --model PATH_OR_HUB_ID (repeatable) and "
                         f"--images DIR or --dataset NAME")
    return [str(path.parent) for path in found]


def run_demo(models: list[str], images: str | None = None, dataset: str | None = None, data_dir: str | None = None,
             trust_remote_code: bool = False, port: int | None = None, share: bool = False,
             cache_dir: str | Path | None = None, device: str | None = None, batch_size: int = 32,
             host: str = "127.0.0.1") -> None:
    """Load `models`, index the image folder (`images`, or the benchmark `dataset` written out as one) and serve the
    app on `host`:`port` (this machine only by default; a public gradio link only with `share=True`)."""
    require_gradio()
    cache_dir = Path(cache_dir or Path.home() / ".cache" / "hf_longclip" / "demo")
    if images is not None:
        list_images(images)  # fail before loading any model
        folder = Path(images)
    else:
        from .index import dataset_folder

        folder = dataset_folder(dataset, data_dir, cache_dir / "datasets")
    demo = Demo(load_demo_models(models, trust_remote_code, device), cache_dir, batch_size)
    status = demo.index_folder(str(folder))
    if demo.folder is None:
        raise ValueError(status)
    print(status, flush=True)
    build_app(demo, example_captions(folder)).launch(server_name=host, server_port=port, share=share)
