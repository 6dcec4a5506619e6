"""Evaluate any CLIP-style model (ours, or a plain transformers `CLIPModel`) on a benchmark in the sample schema:
retrieval, HiMo@K and SSI (HiMo-CLIP), HierarCaps precision/recall/d_corr (+ DITM's d_corr), zero-shot
classification (OneLIP Table 3) and COLA multi-object accuracy, each where the rows carry what it needs.

    report = evaluate_dataset(model, processor, dataset)           # {task: metrics}
    hf-longclip eval --model PATH_OR_ID --dataset urban1k --data-dir data/Urban1k --output-dir eval/urban1k
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .data.text import segment_ends
from .eval_tasks import TASKS, available_tasks, prefix_column
from .metrics.cola import cola_multi
from .metrics.hierarcaps import hierarcaps, text_pool
from .metrics.himo import himo_at_k
from .metrics.retrieval import (
    COCO_1K_FOLDS,
    COCO_5K_IMAGES,
    cxc_retrieval,
    fold_retrieval,
    long_text_retrieval,
    recall_at_k,
)
from .metrics.ssi import ssi
from .metrics.zero_shot import (
    class_embeddings,
    format_prompts,
    zero_shot_classification,
)
from .objectives.molo import kept_components
from .plots import coverage, plot_prefix_similarity, plot_recalls

UNSET_MAX_LENGTH = 1_000_000  # a tokenizer `model_max_length` at least this large means "not set" (transformers: 1e30)


# ---------------------------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------------------------
def text_max_length(processor, model=None) -> int:
    """The number of tokens `processor` truncates texts to: its own `max_length` (our processors), else its
    tokenizer's `model_max_length` (77 for real CLIP checkpoints). Only when the tokenizer leaves that unset is the
    model's `text_config.max_position_embeddings` read, if it has one; a tokenizer's length is also capped by it, when
    present (a RoPE model has no such table and is never capped)."""
    if getattr(processor, "max_length", None) is not None:
        return processor.max_length
    config = getattr(getattr(model, "config", None), "text_config", getattr(model, "config", None))
    positions = getattr(config, "max_position_embeddings", None)
    tokenizer_length = getattr(getattr(processor, "tokenizer", processor), "model_max_length", None)
    if tokenizer_length is not None and tokenizer_length < UNSET_MAX_LENGTH:
        return min(tokenizer_length, positions) if positions is not None else tokenizer_length
    if positions is not None:
        return positions
    raise ValueError(f"cannot tell how many tokens to truncate texts to: {type(processor).__name__} has no "
                     f"`max_length`, its tokenizer's `model_max_length` is unset ({tokenizer_length}) and the "
                     f"model's text config has no `max_position_embeddings`; set `processor.tokenizer."
                     f"model_max_length`")


def _text_inputs(model, processor, texts: list[str]):
    """Tokenised `texts` padded to the longest, truncated to what the processor says (see `text_max_length`): our
    processors truncate themselves (and are told that the empty text, HierarCaps' root, is meant); a plain
    CLIPProcessor is told, and keeps the end-of-text token."""
    if getattr(processor, "max_length", None) is not None:
        return processor(text=texts, padding="longest", allow_empty_text=True)
    return processor(text=texts, padding="longest", truncation=True, return_tensors="pt",
                     max_length=text_max_length(processor, model))


@torch.no_grad()
def _encode(items, embed: Callable, batch_size: int, progress: bool, description: str) -> torch.Tensor:
    """L2-normalised float32 embeddings of `items` (a list or a `datasets` column, read batch by batch so images
    are decoded only when needed), `embed` applied to each batch."""
    starts = tqdm(range(0, len(items), batch_size), desc=description, disable=not progress, leave=False)
    return F.normalize(torch.cat([embed(list(items[i : i + batch_size])).float().cpu() for i in starts]), dim=-1)


def encode_texts(model, processor, texts: Sequence[str], batch_size: int = 128, progress: bool = False) -> torch.Tensor:
    """L2-normalised text embeddings (CPU float32)."""

    def embed(batch):
        return model.get_text_features(**_text_inputs(model, processor, batch).to(model.device)).pooler_output

    return _encode(texts, embed, batch_size, progress, "texts")


def cached_text_encoder(model, processor, batch_size: int = 128, progress: bool = False) -> Callable:
    """`encode(texts)` for the evaluation tasks that remembers each list it encoded, so tasks scoring the same texts
    (HiMo@K's and SSI's caption prefixes, HierarCaps' levels and their distances) encode them once."""
    encoded = {}

    def encode(texts):
        key = tuple(texts)
        if key not in encoded:
            encoded[key] = encode_texts(model, processor, texts, batch_size, progress)
        return encoded[key]

    return encode


def encode_images(model, processor, images, batch_size: int = 128, progress: bool = False) -> torch.Tensor:
    """L2-normalised image embeddings (CPU float32); `images` is a list or a `datasets` image column. Each batch is
    converted to 8-bit RGB by `to_rgb_images` (16-bit images scaled, transparency composited onto white), the same
    conversion our processors apply, so a plain `CLIPProcessor` is given the same images."""
    from .modeling_common.images import to_rgb_images

    def embed(batch):
        pixels = processor(images=to_rgb_images(batch), return_tensors="pt")
        return model.get_image_features(**pixels.to(model.device)).pooler_output

    return _encode(images, embed, batch_size, progress, "images")


def prefix_scores(image_embeds: torch.Tensor, prefixes: Sequence[Sequence[str]], encode) -> list[list[float]]:
    """Cosine similarity of image i with each of its texts `prefixes[i]` (ragged over images)."""
    flat = [text for group in prefixes for text in group]
    owners = torch.tensor([i for i, group in enumerate(prefixes) for _ in group], dtype=torch.long)
    scores = (encode(flat) * image_embeds[owners]).sum(dim=-1).tolist()
    out, start = [], 0
    for group in prefixes:
        out.append(scores[start : start + len(group)])
        start += len(group)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Tasks: each takes the dataset, an `encode(texts)` function and the image embeddings (or computes what it needs)
# ---------------------------------------------------------------------------------------------------------------
def _prefixes(dataset) -> list[list[str]]:
    """Each row's cumulative caption prefixes: its `subtexts` if given (HiMo-Docci), else one per sentence."""
    if prefix_column(dataset) == "subtexts":
        return [list(subtexts) for subtexts in dataset["subtexts"]]
    return [[" ".join(sentences[:end]) for end in range(1, len(sentences) + 1)] for sentences in dataset["sentences"]]


def retrieval_task(dataset, encode, image_embeds, folds: int | None = None) -> dict:
    """Recall@1/5/10 both ways and RSUM over `captions` (several per image, an image hit if any is ranked) or the
    single `caption`, over all the rows (for the COCO Karpathy test split: the "5K" numbers).

    Fold means (`fold_retrieval`) are added under the key ``"<images per fold>"`` written in thousands when round
    (``"1k"``): ``folds=None`` (default) adds the COCO 1K protocol (5 folds of 1000 consecutive images) when the rows
    have `captions` and there are exactly 5000 of them (the COCO 5K test split); ``folds=N`` asks for N folds; 0 or 1
    adds none. Rows carrying the Crisscrossed Captions columns (`hf_longclip.data.benchmarks.load_coco_cxc`) add
    ``"cxc"``: `cxc_task` on the same embeddings."""
    if "captions" in dataset.column_names:
        groups = dataset["captions"]
        texts = [text for group in groups for text in group]
        owners = [i for i, group in enumerate(groups) for _ in group]
    else:
        texts, owners = dataset["caption"], list(range(len(dataset)))
    text_embeds = encode(texts)
    result = long_text_retrieval(image_embeds, text_embeds, owners)
    if folds is None:
        folds = COCO_1K_FOLDS if "captions" in dataset.column_names and len(dataset) == COCO_5K_IMAGES else 0
    if folds > 1:
        per_fold = len(dataset) // folds
        key = f"{per_fold // 1000}k" if per_fold % 1000 == 0 else str(per_fold)
        result[key] = fold_retrieval(image_embeds, text_embeds, owners, folds)
    from .data.benchmarks import CXC_COLUMNS

    if set(CXC_COLUMNS) <= set(dataset.column_names) and "captions" in dataset.column_names:
        result["cxc"] = cxc_task(dataset, image_embeds, text_embeds)
    return result


def cxc_positive_sets(dataset) -> tuple[dict[str, list[list[int]]], int]:
    """The four CxC positive sets of rows read by `load_coco_cxc`, as indices into the rows (images) and into the
    flattened `captions` (texts): ``{"i2t", "t2i", "t2t", "i2i"}``, and the number of positive ids that name no
    loaded row (other split, or dropped by ``max_samples`` / an unreadable image).

    I->T: an image's own captions plus its `cxc_texts`; T->I: the inverse (a caption's own image plus the images it
    was rated as describing); T->T: each caption's `cxc_caption_positives`; I->I: each image's `cxc_images`."""
    sentids = dataset["sentids"]
    image_row = {int(coco_id): row for row, coco_id in enumerate(dataset["image_id"])}
    text_index, owners = {}, []
    for row, ids in enumerate(sentids):
        for sentid in ids:
            text_index[int(sentid)] = len(owners)
            owners.append(row)
    missing = 0

    def known(ids, index):
        nonlocal missing
        found = [index[int(i)] for i in ids if int(i) in index]
        missing += len(ids) - len(found)
        return found

    i2t, t2i = [], [[row] for row in owners]
    for row, (ids, extra) in enumerate(zip(sentids, dataset["cxc_texts"])):
        texts = [text_index[int(sentid)] for sentid in ids] + known(extra, text_index)
        i2t.append(texts)
        for text in texts:
            if owners[text] != row:
                t2i[text].append(row)
    t2t = [known(ids, text_index) for groups in dataset["cxc_caption_positives"] for ids in groups]
    i2i = [known(ids, image_row) for ids in dataset["cxc_images"]]
    return {"i2t": i2t, "t2i": t2i, "t2t": t2t, "i2i": i2i}, missing


def cxc_task(dataset, image_embeds, text_embeds) -> dict:
    """Crisscrossed Captions Recall@1/5 for I->T, T->I, T->T and I->I (`cxc_retrieval`) over the rows' images and
    their flattened `captions` (COCO Karpathy test: 5000 images, 25k captions); queries without a positive are
    skipped (``<direction>_num_queries`` counts those scored); ``num_missing_positives``: ids naming no loaded row."""
    positives, missing = cxc_positive_sets(dataset)
    result = cxc_retrieval(image_embeds, text_embeds, positives["i2t"], positives["t2i"], positives["t2t"],
                           positives["i2i"])
    result["num_missing_positives"] = missing
    return result


def himo_task(dataset, encode, image_embeds) -> dict:
    """HiMo@2 and HiMo@3 (Eq. 6, K segments of the prefixes) and HiMo@K (Eq. 5, Pearson over every prefix) on the
    rows long enough for each; plus the mean similarity at each prefix index (HiMo-CLIP Fig. 3)."""
    prefixes = _prefixes(dataset)
    scores = prefix_scores(image_embeds, prefixes, encode)
    results = {}
    for k in (2, 3):
        rows = [row for row in scores if len(row) >= k]
        if rows:
            segmented = [[row[end - 1] for end in segment_ends(len(row), k)] for row in rows]
            results[f"himo@{k}"] = himo_at_k(segmented, method="accuracy")["himo_at_k"]
    long_rows = [row for row in scores if len(row) >= 4]
    if long_rows:
        pearson = himo_at_k(long_rows, method="pearson")
        results.update({"himo@k": pearson["himo_at_k"], "himo@k_num_samples": pearson["num_samples"]})
    longest = max(len(row) for row in scores)
    results.update(num_images=len(scores), num_prefixes=sum(map(len, scores)))
    results["mean_similarity_by_prefix"] = [
        sum(row[k] for row in scores if len(row) > k) / sum(len(row) > k for row in scores) for k in range(longest)
    ]
    return results


def ssi_task(dataset, encode, image_embeds, position: str = "end") -> dict:
    """Semantic Stability Index (HiMo-CLIP Eq. 22): the relative score change of each caption prefix when the row's
    off-topic `distractor` sentence is inserted at its `position` ("start" or "end")."""
    if position not in ("start", "end"):
        raise ValueError(f"position must be 'start' or 'end', got {position!r}")
    prefixes = _prefixes(dataset)
    noisy = [[f"{distractor} {text}" if position == "start" else f"{text} {distractor}" for text in group]
             for group, distractor in zip(prefixes, dataset["distractor"])]
    original, perturbed = prefix_scores(image_embeds, prefixes, encode), prefix_scores(image_embeds, noisy, encode)
    # Eq. 22 divides by the original score: rows with a score <= 0 have no SSI, and are counted, not hidden.
    kept = [i for i, row in enumerate(original) if min(row) > 0]
    if not kept:
        return {"ssi": float("nan"), "num_samples": 0, "num_excluded_nonpositive": len(original), "position": position}
    return {**ssi([original[i] for i in kept], [perturbed[i] for i in kept]),
            "num_excluded_nonpositive": len(original) - len(kept), "position": position}


def hierarcaps_task(dataset, encode, image_embeds) -> dict:
    """HierarCaps hierarchical retrieval over the pool of every level text, root = the empty text."""
    chains = [list(levels) for levels in dataset["levels"]]
    texts, pool_embeds, chain_index = text_pool(chains, encode([text for chain in chains for text in chain])
                                                .reshape(len(chains), len(chains[0]), -1))
    return hierarcaps(image_embeds, pool_embeds, chain_index, encode([""])[0])


def zero_shot_task(dataset, encode, image_embeds, classnames: Sequence[str], templates: Sequence[str]) -> dict:
    """Top-1/top-5 accuracy of the `label` column against prompt-ensembled class embeddings."""
    prompts = format_prompts(classnames, templates)
    flat = encode([prompt for group in prompts for prompt in group]).reshape(len(classnames), len(templates), -1)
    ks = (1, 5) if len(classnames) >= 5 else (1,)
    return zero_shot_classification(image_embeds, class_embeddings(flat), dataset["label"], ks=ks)


def cola_task(model, processor, dataset, encode, batch_size: int, progress: bool) -> dict:
    """COLA multi-object accuracy on rows with two `images` and their two `captions`."""
    pairs = dataset["images"]
    images = encode_images(model, processor, [image for pair in pairs for image in pair], batch_size, progress)
    texts = encode([text for pair in dataset["captions"] for text in pair])
    scores = torch.einsum("nid,ncd->nic", images.reshape(len(pairs), 2, -1), texts.reshape(len(pairs), 2, -1))
    return cola_multi(scores)


def hard_negative_pairs(dataset) -> list[dict]:
    """COLA-style rows from the synthetic scenes: the two scenes of a group differ only in their last object."""
    groups: dict[int, list[int]] = {}
    for index, group in enumerate(dataset["group_id"]):
        groups.setdefault(group, []).append(index)
    pairs = [indices for indices in groups.values() if len(indices) == 2]
    return [{"images": [dataset[i]["image"] for i in pair], "captions": [dataset[i]["caption"] for i in pair]}
            for pair in pairs]


def late_difference_pairs(dataset, tokenizer, length: int = 77) -> list[tuple[int, int]]:
    """Row indices of the synthetic scenes' hard-negative pairs (two rows sharing `group_id`) whose captions agree on
    their first `length` tokens under `tokenizer` and differ later: a text encoder that reads only `length` tokens
    sees the same text twice (OneLIP's late-token test)."""
    groups: dict[int, list[int]] = {}
    for index, group in enumerate(dataset["group_id"]):
        groups.setdefault(group, []).append(index)
    ids = tokenizer(list(dataset["caption"]), verbose=False)["input_ids"]
    return [(a, b) for a, b in (pair for pair in groups.values() if len(pair) == 2)
            if ids[a] != ids[b] and ids[a][:length] == ids[b][:length]]


PAIR_TIE_TOLERANCE = 1e-6  # cosine scores closer than this are a tie (same truncated text, other batch padding)


def pair_recall_at_1(image_embeds: torch.Tensor, text_embeds: torch.Tensor,
                     pairs: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """R@1 image->text and text->image within each pair (a gallery of two: the own item and its twin), in percent.
    A tie counts half, so chance is 50 and a model that cannot tell the twins apart scores exactly 50."""
    if not pairs:
        return float("nan"), float("nan")
    index = torch.tensor(list(pairs))
    similarity = torch.einsum("pid,pjd->pij", image_embeds[index], text_embeds[index])  # (pairs, image, text)
    own = similarity.diagonal(dim1=1, dim2=2)

    def recall(other: torch.Tensor) -> float:
        margin = own - other
        return ((margin > PAIR_TIE_TOLERANCE).double() + 0.5 * (margin.abs() <= PAIR_TIE_TOLERANCE).double()
                ).mean().item() * 100

    return recall(similarity[:, [0, 1], [1, 0]]), recall(similarity[:, [1, 0], [0, 1]])


def recall_at_1_by_text(image_embeds: torch.Tensor, text_embeds: torch.Tensor, owners: torch.Tensor) -> tuple[float,
                                                                                                             float]:
    """R@1 both ways, in percent, when several images share one text (`owners[i]`: the index in `text_embeds` of
    image i's text): image->text hits when its own text scores highest (one query per image), text->image when
    one of the images carrying the text scores highest (one query per distinct text); ties count as hits."""
    similarity = image_embeds @ text_embeds.T  # (images, distinct texts)
    own = similarity.gather(1, owners[:, None])
    i2t = ((similarity > own).sum(dim=1) == 0).double().mean().item() * 100
    carries = owners[:, None] == torch.arange(text_embeds.shape[0])[None]
    best_own = similarity.masked_fill(~carries, float("-inf")).amax(dim=0)
    best_other = similarity.masked_fill(carries, float("-inf")).amax(dim=0)
    t2i = (best_own >= best_other).double().mean().item() * 100
    return i2t, t2i


def evaluate_text_lengths(model, processor, dataset, hard_pairs: Sequence[tuple[int, int]], batch_size: int = 128,
                          progress: bool = False) -> dict:
    """OneLIP's Table 1 / Table 4 miniature on rows with `caption`, `sentences` (the synthetic scenes): R@1 both
    ways with the whole captions (`r1_*`, long text); with each caption's first sentence alone (`short_r1_*`, short
    text; identical first sentences are one text, see `recall_at_1_by_text`); and within the `hard_pairs` (see
    `late_difference_pairs`, `pair_recall_at_1`: `hard_r1_*`, chance 50). Texts are truncated by `processor`."""
    model.eval()
    image_embeds = encode_images(model, processor, _ImageColumn(dataset), batch_size, progress)
    long_embeds = encode_texts(model, processor, dataset["caption"], batch_size, progress)
    similarity = image_embeds @ long_embeds.T
    first = [sentences[0] for sentences in dataset["sentences"]]
    distinct = sorted(set(first))
    owners = torch.tensor([distinct.index(text) for text in first])
    short_i2t, short_t2i = recall_at_1_by_text(image_embeds, encode_texts(model, processor, distinct, batch_size),
                                               owners)
    hard_i2t, hard_t2i = pair_recall_at_1(image_embeds, long_embeds, hard_pairs)
    return {"r1_i2t": recall_at_k(similarity, 1), "r1_t2i": recall_at_k(similarity.T, 1),
            "short_r1_i2t": short_i2t, "short_r1_t2i": short_t2i, "hard_r1_i2t": hard_i2t, "hard_r1_t2i": hard_t2i,
            "num_images": len(dataset), "num_short_texts": len(distinct), "num_hard_pairs": len(hard_pairs)}


@torch.no_grad()
def evaluate_dataset(
    model,
    processor,
    dataset,
    tasks: Sequence[str] | None = None,
    batch_size: int = 64,
    progress: bool = True,
    classnames: Sequence[str] | None = None,
    templates: Sequence[str] = ("a photo of a {}.",),
) -> dict[str, dict]:
    """Run every task of `tasks` (default: all the rows support, see `available_tasks`) and return their metrics.

    Zero-shot classification takes its `classnames` from the `label` column's ClassLabel names unless given.
    """
    supported = available_tasks(dataset)
    tasks = tuple(tasks) if tasks is not None else supported
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; the tasks are {list(TASKS)}")
    unsupported = [task for task in tasks if task not in supported]
    if unsupported:
        raise ValueError(f"tasks {unsupported} need columns this dataset lacks (it has {dataset.column_names}); "
                         f"possible here: {list(supported)}")
    model.eval()

    def encode(texts):
        return encode_texts(model, processor, texts, batch_size, progress)

    image_embeds = None
    if any(TASKS[task].uses_image_embeds for task in tasks):
        image_embeds = encode_images(model, processor, _ImageColumn(dataset), batch_size, progress)
    inputs = TaskInputs(model, processor, dataset, encode, image_embeds, batch_size, progress, classnames, templates)
    return {task: globals()[TASKS[task].runner](inputs)
            for task in tqdm(tasks, desc="tasks", disable=not progress)}


@dataclass
class TaskInputs:
    """What a task runner (`TASKS[name].runner`, below) receives from `evaluate_dataset`."""

    model: object
    processor: object
    dataset: object
    encode: Callable  # texts -> L2-normalised embeddings
    image_embeds: torch.Tensor | None  # of the `image` column; None when no chosen task uses it
    batch_size: int = 64
    progress: bool = False
    classnames: Sequence[str] | None = None
    templates: Sequence[str] = ("a photo of a {}.",)


def run_retrieval(inputs: TaskInputs) -> dict:
    return retrieval_task(inputs.dataset, inputs.encode, inputs.image_embeds)


def run_himo(inputs: TaskInputs) -> dict:
    return himo_task(inputs.dataset, inputs.encode, inputs.image_embeds)


def run_ssi(inputs: TaskInputs) -> dict:
    return ssi_task(inputs.dataset, inputs.encode, inputs.image_embeds)


def run_hierarcaps(inputs: TaskInputs) -> dict:
    return hierarcaps_task(inputs.dataset, inputs.encode, inputs.image_embeds)


def run_zero_shot(inputs: TaskInputs) -> dict:
    names = inputs.classnames or inputs.dataset.features["label"].names
    return zero_shot_task(inputs.dataset, inputs.encode, inputs.image_embeds, names, inputs.templates)


def run_cola(inputs: TaskInputs) -> dict:
    dataset = inputs.dataset
    rows = dataset if "images" in dataset.column_names else _Rows(hard_negative_pairs(dataset))
    return cola_task(inputs.model, inputs.processor, rows, inputs.encode, inputs.batch_size, inputs.progress)


class _ImageColumn:
    """A dataset's `image` column read lazily, slice by slice (so a 30k-image benchmark is never decoded whole)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index: slice):
        return self.dataset[index]["image"]


class _Rows:
    """Column access over a list of row dicts, the way `cola_task` reads a dataset."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, column: str):
        return [row[column] for row in self.rows]


def evaluate_long_captions(model, processor, dataset, batch_size: int = 128, progress: bool = True,
                           hide_tau: float | None = None, hide_batch_size: int = 64) -> dict:
    """The main job's summary: R@1 both ways on full captions, HiMo@2 / HiMo@3 (Eq. 6) on K cumulative segments,
    HiMo@K (Eq. 5) on all sentence prefixes, the mean similarity at each prefix length (for plots) and, where rows
    carry a `distractor`, SSI (Eq. 22, distractor appended). With `hide_tau`: `hide_m`, the mean number of principal
    components HiDe keeps at that threshold over consecutive batches of `hide_batch_size` test captions."""
    model.eval()
    encode = cached_text_encoder(model, processor, batch_size, progress)  # SSI rescores HiMo@K's prefixes
    image_embeds = encode_images(model, processor, _ImageColumn(dataset), batch_size, progress)
    caption_embeds = encode(dataset["caption"])
    similarity = image_embeds @ caption_embeds.T
    himo = himo_task(dataset.select_columns(["sentences"]), encode, image_embeds)
    results = {"r1_i2t": recall_at_k(similarity, 1), "r1_t2i": recall_at_k(similarity.T, 1),
               **{key: himo[key] for key in ("himo@2", "himo@3", "himo@k", "mean_similarity_by_prefix",
                                             "num_images", "num_prefixes")}}
    if "distractor" in dataset.column_names:
        results["ssi"] = ssi_task(dataset.select_columns(["sentences", "distractor"]), encode, image_embeds)["ssi"]
    if hide_tau is not None:
        batches = caption_embeds.split(hide_batch_size)
        results["hide_m"] = sum(kept_components(batch, hide_tau) for batch in batches) / len(batches)
    return results


# ---------------------------------------------------------------------------------------------------------------
# The one-command evaluation (plots: `hf_longclip.plots`)
# ---------------------------------------------------------------------------------------------------------------
def load_model(model_name_or_path: str, device: str | None = None):
    """Any of our checkpoints (AutoModel, trust_remote_code) or a plain transformers CLIPModel, with its processor,
    in eval mode on `device` (default: CUDA when available).

    Fails fast with a one-line reason: `FileNotFoundError` for a path (starts with '.', '/' or '~', has more than
    one '/', starts with an existing directory, or is no valid Hub id) that is not a directory; `OSError` for a Hub
    id that is not cached when the Hub cannot be reached (`HF_HUB_OFFLINE`, or no answer within 3 s: without this
    probe huggingface_hub retries each file for ~25 s). A cached Hub id then loads from its cached snapshot."""
    import os

    from huggingface_hub import (
        HfApi,
        is_offline_mode,
        snapshot_download,
        try_to_load_from_cache,
    )
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    name = str(model_name_or_path)
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        name = str(path)
    else:
        if path.exists():
            raise NotADirectoryError(f"not a checkpoint directory: {name} is a file")
        try:
            validate_repo_id(name)
            hub_id = not (name.startswith((".", "~")) or (len(path.parts) > 1 and Path(path.parts[0]).is_dir()))
        except HFValidationError:
            hub_id = False
        if not hub_id:
            raise FileNotFoundError(f"no such checkpoint directory: {name} does not exist")
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
        reason = "HF_HUB_OFFLINE is set" if is_offline_mode() else None
        if reason is None:
            try:  # one request, no retries
                HfApi().model_info(name, timeout=3)
            except RepositoryNotFoundError:
                raise OSError(f"{name} is neither a local directory nor a model on the Hub (a private one needs "
                              f"`hf auth login`)") from None
            except HfHubHTTPError:
                pass  # the Hub answered: let from_pretrained tell what is wrong
            except Exception as err:  # connection refused, DNS failure, timeout, proxy error
                reason = " ".join(f"no network: {type(err).__name__}: {err}".split())
        if reason is not None and not cached:
            raise OSError(f"cannot reach the Hub to download {name} ({reason}) and it is not cached: download it "
                          f"first (`hf download {name}`) or pass a local checkpoint directory")
        if reason is not None:  # the cached snapshot's directory: `local_files_only` would still look for adapters
            name = snapshot_download(name, local_files_only=True)
    from transformers import AutoModel, AutoProcessor

    model = AutoModel.from_pretrained(name, trust_remote_code=True)
    processor = AutoProcessor.from_pretrained(name, trust_remote_code=True)
    if not (hasattr(model, "get_text_features") and hasattr(model, "get_image_features")):
        raise ValueError(f"{model_name_or_path} is a {type(model).__name__}: not a CLIP-style dual encoder")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), processor


def _check_data_dir(name: str, data_dir: str | None) -> None:
    """Every benchmark but the generated "synthetic" one reads its files from `data_dir`."""
    if name != "synthetic" and data_dir is None:
        raise ValueError(f"--data-dir is required for the {name!r} benchmark")


def load_eval_dataset(name: str, data_dir: str | None = None, split: str | None = None,
                      max_samples: int | None = None):
    """(dataset, the split it is, number of skipped corrupt images, zero-shot class names and templates) for a
    benchmark name:
    one of `hf_longclip.data.benchmarks.BENCHMARKS` (files under `data_dir`) or "synthetic" (generated;
    `data_dir` is then its cache)."""
    if name == "synthetic":
        from .data.synthetic import CLASS_TEMPLATES, CLASSNAMES, load_synthetic_scenes

        split = split or "test"
        dataset = load_synthetic_scenes(cache_dir=data_dir)[split]
        if max_samples is not None:
            dataset = dataset.select(range(min(max_samples, len(dataset))))
        return dataset, split, 0, CLASSNAMES, CLASS_TEMPLATES
    from .data.benchmarks import load_benchmark, load_coco_cxc

    _check_data_dir(name, data_dir)
    if name == "coco_cxc":  # COCO Karpathy + Crisscrossed Captions (data_dir/cxc/): retrieval adds "cxc" and "1k"
        benchmark = load_coco_cxc(data_dir, split=split, max_samples=max_samples)
        return benchmark.dataset, benchmark.split, benchmark.num_skipped, None, ("a photo of a {}.",)
    benchmark = load_benchmark(name, data_dir, split=split, max_samples=max_samples)
    return benchmark.dataset, benchmark.split, benchmark.num_skipped, None, ("a photo of a {}.",)


def run_evaluation(model_name_or_path: str, dataset_name: str, data_dir: str | None = None,
                   output_dir: str | Path = "eval", split: str | None = None, max_samples: int | None = None,
                   tasks: Sequence[str] | None = None, batch_size: int = 64, device: str | None = None,
                   progress: bool = True) -> dict:
    """Evaluate a model on a benchmark; write `report.json` and the plots into `output_dir`; return the report."""
    _check_data_dir(dataset_name, data_dir)  # before the model loads: a missing argument fails at once
    model, processor = load_model(model_name_or_path, device)
    dataset, split, num_skipped, classnames, templates = load_eval_dataset(dataset_name, data_dir, split,
                                                                           max_samples)
    metrics = evaluate_dataset(model, processor, dataset, tasks, batch_size, progress, classnames, templates)
    report = {"model": str(model_name_or_path), "dataset": dataset_name, "split": split, "num_samples": len(dataset),
              "num_skipped_images": num_skipped, "metrics": metrics, "plots": []}
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    name = Path(str(model_name_or_path)).name
    if "retrieval" in metrics:
        report["plots"].append(str(plot_recalls(metrics["retrieval"], output_dir / "recall.png",
                                                f"{name} on {dataset_name} ({split})")))
    if "himo" in metrics:
        himo = metrics["himo"]
        covers = coverage(himo["num_images"], himo["num_prefixes"], "caption prefixes")
        report["plots"].append(str(plot_prefix_similarity({name: himo["mean_similarity_by_prefix"]},
                                                          output_dir / "himo_prefix_similarity.png", covers,
                                                          f"{name} on {dataset_name} ({split})")))
    (output_dir / "report.json").write_text(json.dumps(report, indent=2))
    return report
