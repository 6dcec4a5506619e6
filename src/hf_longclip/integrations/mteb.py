"""Our checkpoints as MTEB models, and the long-caption benchmarks the library reads as MTEB image-text retrieval
tasks (`mteb` 2.26, whose image tasks were MIEB), run by MTEB's own evaluation::

    import mteb
    from mteb.cache import ResultCache
    from hf_longclip.integrations.mteb import long_caption_tasks, model_meta

    tasks = long_caption_tasks("urban1k", "data/Urban1k")      # Urban1kI2TRetrieval, Urban1kT2IRetrieval
    results = mteb.evaluate(model_meta("path/or/hub-id"), tasks, cache=ResultCache("mteb-results"))

`model_meta(checkpoint)` is the checkpoint's `mteb.models.ModelMeta` (a `LongCLIPModelMeta`: image and text
modalities, cosine similarity, the projection width and the text length it reads); its loader is `LongCLIPEncoder`,
which loads the checkpoint as `hf-longclip eval` does (`hf_longclip.evaluation.load_model`: any of our dual encoders
or a plain `CLIPModel`) and embeds MTEB's batches of texts or images as `hf-longclip eval` does (`encode_texts`,
`encode_images`: texts cut at the model's own length, 248 tokens for HiMo-CLIP, never CLIP's 77).

`long_caption_tasks(benchmark, data_dir, ...)` reads any benchmark of `hf-longclip eval --dataset` from its files
with the library's loaders (no download; ``protocol``, ``split`` and ``max_samples`` as there) and returns two
`AbsTaskRetrieval` tasks of MTEB's ``Any2AnyRetrieval`` type: ``<Name>I2TRetrieval`` (an image queries, every
caption of the image relevant) and ``<Name>T2IRetrieval`` (a caption's query, its image relevant). MTEB scores them
with its retrieval evaluator (pytrec_eval): nDCG@10 is the main score, beside recall@k, hit rate@k and the rest.
MTEB's ``recall_at_k`` is the share of the query's relevant documents among its top k, so for text -> image (one
relevant image) and for image -> text with one caption per image (Urban1k, DOCCI, DCI, ShareGPT4V) ``recall_at_1``
is `hf-longclip eval`'s R@1 over 100; where an image has several captions (COCO, Flickr30k) MTEB's image -> text
``hit_rate_at_k`` is (some caption among the top k). Both agree on scores without ties; among tied scores MTEB
ranks by its own order (the search keeps `torch.topk`'s top k, pytrec_eval sorts what it gets), which no
`--tie-rule` of `hf-longclip eval` names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..evaluation.encoding import encode_images, encode_texts, retrieval_texts, text_max_length
from ..evaluation.loading import load_model
from ..modeling_common.optional import require
from . import BENCHMARK_PACKAGES

require("mteb", "benchmarks", BENCHMARK_PACKAGES, "MTEB's evaluation")  # one error naming the extra
from mteb.abstasks.retrieval import AbsTaskRetrieval  # noqa: E402
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402
from mteb.models.abs_encoder import AbsEncoder  # noqa: E402
from mteb.models.model_meta import ModelMeta  # noqa: E402

DIRECTIONS = {"i2t": ("I2T", "image", "text"), "t2i": ("T2I", "text", "image")}
DISPLAY_NAMES = {"urban1k": "Urban1k", "docci": "DOCCI", "dci": "DCI", "sharegpt4v": "ShareGPT4V",
                 "himo_docci": "HiMoDocci", "coco": "COCO", "flickr30k": "Flickr30k"}


class LongCLIPEncoder(AbsEncoder):
    """MTEB's encoder of one checkpoint (`model_meta`'s loader): each batch of MTEB's data loader is ``{"text":
    [...]}`` or ``{"image": [...]}`` and is embedded L2-normalised, float32, as `hf-longclip eval` embeds it."""

    def __init__(self, model_name: str, revision: str | None = None, device: str | None = None,
                 checkpoint: str | None = None, **kwargs: Any):
        self.model, self.processor = load_model(checkpoint or model_name, device)

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs: Any):
        embeddings = []
        for batch in inputs:
            if "text" in batch and "image" in batch:
                raise ValueError(f"{task_metadata.name}: a dual encoder embeds texts or images, not both in one input")
            if "text" in batch:
                embeddings.append(encode_texts(self.model, self.processor, list(batch["text"]), len(batch["text"])))
            else:
                embeddings.append(encode_images(self.model, self.processor, list(batch["image"]),
                                                len(batch["image"])))
        return torch.cat(embeddings).numpy()


class LongCLIPModelMeta(ModelMeta):
    """MTEB's `ModelMeta`, less its rule that a model of the image modality needs mteb's ``image`` extra
    (torchvision, which does not import beside the CPU build of torch 2.13): `LongCLIPEncoder` preprocesses images
    with the checkpoint's own processor and imports no torchvision. Extras named in `extra_requirements_groups` are
    still checked."""

    def _resolve_extras_groups(self) -> list[str]:
        return list(self.extra_requirements_groups or [])


def model_meta(checkpoint: str, name: str | None = None, revision: str | None = None) -> ModelMeta:
    """The `ModelMeta` of `checkpoint` (a folder or Hub id: any of our dual encoders or a plain `CLIPModel`), its
    loader `LongCLIPEncoder`; the model is loaded here once to read its embedding width and text length. `name` is
    the ``organization/model`` MTEB files the results under (default: a Hub id itself, a folder as
    ``local/<folder name>``)."""
    model, processor = load_model(checkpoint, "cpu")
    if name is None:
        name = checkpoint if _hub_id(checkpoint) else f"local/{Path(checkpoint).resolve().name}"
    return LongCLIPModelMeta(
        loader=LongCLIPEncoder, loader_kwargs={"checkpoint": checkpoint}, name=name, revision=revision,
        release_date=None, languages=["eng-Latn"],
        n_parameters=sum(p.numel() for p in model.parameters()), memory_usage_mb=None,
        max_tokens=text_max_length(processor, model), embed_dim=model.config.projection_dim, license=None,
        open_weights=True, public_training_code=None, public_training_data=None, framework=["PyTorch"],
        similarity_fn_name="cosine", use_instructions=False, training_datasets=None, modalities=["image", "text"],
        model_type=["dense"],
    )


def _hub_id(checkpoint: str) -> bool:
    return not Path(checkpoint).expanduser().exists() and checkpoint.count("/") == 1


class LongCaptionRetrieval(AbsTaskRetrieval):
    """One direction (``i2t`` or ``t2i``) of a long-caption benchmark read from local files; `long_caption_task`
    makes one subclass per benchmark and direction (MTEB reads a task's `metadata` from its class)."""

    source: tuple  # (benchmark, data_dir, split, max_samples, protocol), as `load_eval_benchmark` takes them
    direction: str

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """The rows of the benchmark (`hf_longclip.data.eval_datasets.load_eval_benchmark`) as MTEB's corpus,
        queries and relevance judgements: images ``image-<row>``, captions ``text-<index>`` in the order
        `hf-longclip eval` encodes them."""
        if self.data_loaded:
            return
        from datasets import Dataset

        from ..data.eval_datasets import load_eval_benchmark

        name, data_dir, split, max_samples, protocol = self.source
        rows = load_eval_benchmark(name, data_dir, split, max_samples, protocol).dataset
        texts, owners = retrieval_texts(rows)
        images = rows.select_columns(["image"]).add_column("id", [f"image-{row}" for row in range(len(rows))])
        captions = Dataset.from_dict({"id": [f"text-{index}" for index in range(len(texts))], "text": list(texts)})
        relevant: dict[str, dict[str, int]] = {}
        for index, owner in enumerate(owners):
            if self.direction == "i2t":
                relevant.setdefault(f"image-{owner}", {})[f"text-{index}"] = 1
            else:
                relevant[f"text-{index}"] = {f"image-{owner}": 1}
        queries, corpus = (images, captions) if self.direction == "i2t" else (captions, images)
        self.dataset = {"default": {self.metadata.eval_splits[0]: RetrievalSplitData(
            queries=queries, corpus=corpus, relevant_docs=relevant, top_ranked=None)}}
        self.data_loaded = True


def long_caption_task(benchmark: str, data_dir: str | None, direction: str, protocol: str | None = None,
                      split: str | None = None, max_samples: int | None = None) -> LongCaptionRetrieval:
    """The MTEB task of `benchmark` (a name of `hf-longclip eval --dataset`, read from `data_dir` as that command
    reads it) in `direction`, ``"i2t"`` or ``"t2i"``: an instance of a `LongCaptionRetrieval` subclass named
    ``<Name>I2TRetrieval`` / ``<Name>T2IRetrieval``."""
    from ..data.eval_datasets import check_data_dir

    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    protocol = check_data_dir(benchmark, data_dir, protocol)
    tag, query, document = DIRECTIONS[direction]
    name = f"{DISPLAY_NAMES.get(benchmark, benchmark.title().replace('_', ''))}{tag}Retrieval"
    metadata = TaskMetadata(
        name=name, description=f"{benchmark} long-caption retrieval, {query} -> {document}, read from local files "
                               f"by hf-longclip (protocol {protocol})",
        reference=None, dataset={"path": str(data_dir), "revision": protocol or "local"}, type="Any2AnyRetrieval",
        category=direction, modalities=["image", "text"], eval_splits=[split or "test"], eval_langs=["eng-Latn"],
        main_score="ndcg_at_10", date=None, domains=None, task_subtypes=None, license=None,
        annotations_creators=None, dialect=None, sample_creation=None, bibtex_citation=None,
    )
    task_class = type(name, (LongCaptionRetrieval,), {"metadata": metadata, "direction": direction,
                                                      "source": (benchmark, data_dir, split, max_samples, protocol)})
    return task_class()


def long_caption_tasks(benchmark: str, data_dir: str | None, protocol: str | None = None, split: str | None = None,
                       max_samples: int | None = None) -> list[LongCaptionRetrieval]:
    """The image -> text and text -> image MTEB tasks of `benchmark` (a name of `hf-longclip eval --dataset`) read
    from `data_dir` as that command reads it."""
    return [long_caption_task(benchmark, data_dir, direction, protocol, split, max_samples) for direction in DIRECTIONS]


__all__ = ["LongCLIPEncoder", "LongCLIPModelMeta", "LongCaptionRetrieval", "long_caption_task", "long_caption_tasks",
           "model_meta"]
