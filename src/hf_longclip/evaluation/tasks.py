"""The evaluation tasks: what each computes from a dataset in the sample schema, and one ordered registry of them used
by `evaluate_dataset` and `hf-longclip eval --tasks`: retrieval, HiMo@K and SSI (HiMo-CLIP), HierarCaps
precision/recall/d_corr (+ DITM's d_corr), zero-shot classification (OneLIP Table 3) and COLA multi-object accuracy,
each where the rows carry what it needs.

    TASKS["himo"].columns                              # the column sets that enable the task (any one of them)
    available_tasks(dataset)                           # the tasks a dataset's rows support, in registry order
    report = evaluate_dataset(model, processor, dataset)   # {task: metrics}

Each task function takes the dataset, an `encode(texts)` function and the image embeddings (or computes what it
needs); each registry entry holds its runner, which takes a `TaskInputs` and returns the task's metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import pyarrow.compute as pc
import torch
from tqdm.auto import tqdm

from ..data.benchmarks import CXC_COLUMNS
from ..data.synthetic import hard_negative_indices
from ..data.text import segment_ends
from ..metrics.cola import cola_multi
from ..metrics.hierarcaps import hierarcaps, text_pool
from ..metrics.himo import himo_at_k
from ..metrics.retrieval import (
    COCO_1K_FOLDS,
    COCO_5K_IMAGES,
    cxc_retrieval,
    fold_retrieval,
    long_text_retrieval,
)
from ..metrics.ssi import ssi
from ..metrics.ties import COLA_TIE_RULE, DEFAULT_TIE_RULE, HIERARCAPS_TIE_RULE
from ..metrics.zero_shot import (
    class_embeddings,
    format_prompts,
    zero_shot_classification,
)
from .encoding import ImageColumn, encode_images, encode_texts, retrieval_texts
from .scoring import DEFAULT_TOPK, check_scoring, conditioned_retrieval_task
from .ties import OFFICIAL, resolve_tie_rules


def prefix_column(dataset) -> str:
    """The column holding each row's caption prefixes: `subtexts` if given (HiMo-Docci), else `sentences`."""
    return "subtexts" if "subtexts" in dataset.column_names else "sentences"


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


def _prefixes(dataset) -> list[list[str]]:
    """Each row's cumulative caption prefixes: its `subtexts` if given (HiMo-Docci), else one per sentence."""
    if prefix_column(dataset) == "subtexts":
        return [list(subtexts) for subtexts in dataset["subtexts"]]
    return [[" ".join(sentences[:end]) for end in range(1, len(sentences) + 1)] for sentences in dataset["sentences"]]


def retrieval_task(dataset, encode, image_embeds, folds: int | None = None, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """Recall@1/5/10 both ways and RSUM over `captions` (several per image, an image hit if any is ranked) or the
    single `caption`, over all the rows (for the COCO Karpathy test split: the "5K" numbers).

    Fold means (`fold_retrieval`) are added under the key ``"<images per fold>"`` written in thousands when round
    (``"1k"``): ``folds=None`` (default) adds the COCO 1K protocol (5 folds of 1000 consecutive images) when the rows
    have `captions` and there are exactly 5000 of them (the COCO 5K test split); ``folds=N`` asks for N folds; 0 or 1
    adds none. Rows carrying the Crisscrossed Captions columns (`hf_longclip.data.benchmarks.load_coco_cxc`) add
    ``"cxc"``: `cxc_task` on the same embeddings. Ties are credited by ``tie_rule`` (`hf_longclip.metrics.ties`)."""
    texts, owners = retrieval_texts(dataset)
    text_embeds = encode(texts)
    result = long_text_retrieval(image_embeds, text_embeds, owners, tie_rule=tie_rule)
    if folds is None:
        folds = COCO_1K_FOLDS if "captions" in dataset.column_names and len(dataset) == COCO_5K_IMAGES else 0
    if folds > 1:
        per_fold = len(dataset) // folds
        key = f"{per_fold // 1000}k" if per_fold % 1000 == 0 else str(per_fold)
        result[key] = fold_retrieval(image_embeds, text_embeds, owners, folds, tie_rule=tie_rule)
    if set(CXC_COLUMNS) <= set(dataset.column_names) and "captions" in dataset.column_names:
        result["cxc"] = cxc_task(dataset, image_embeds, text_embeds, tie_rule)
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


def cxc_task(dataset, image_embeds, text_embeds, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """Crisscrossed Captions Recall@1/5 for I->T, T->I, T->T and I->I (`cxc_retrieval`) over the rows' images and
    their flattened `captions` (COCO Karpathy test: 5000 images, 25k captions); queries without a positive are
    skipped (``num_queries_<direction>`` counts those scored); ``num_missing_positives``: ids naming no loaded row."""
    positives, missing = cxc_positive_sets(dataset)
    result = cxc_retrieval(image_embeds, text_embeds, positives["i2t"], positives["t2i"], positives["t2t"],
                           positives["i2i"], tie_rule=tie_rule)
    result["num_missing_positives"] = missing
    return result


def himo_task(dataset, encode, image_embeds, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """HiMo@2 and HiMo@3 (Eq. 6, K segments of the prefixes, equal scores credited by ``tie_rule``) and HiMo@K
    (Eq. 5, Pearson over every prefix) on the rows long enough for each; plus the mean similarity at each prefix
    index (HiMo-CLIP Fig. 3)."""
    prefixes = _prefixes(dataset)
    scores = prefix_scores(image_embeds, prefixes, encode)
    results = {}
    for k in (2, 3):
        rows = [row for row in scores if len(row) >= k]
        if rows:
            segmented = [[row[end - 1] for end in segment_ends(len(row), k)] for row in rows]
            results[f"himo@{k}"] = himo_at_k(segmented, method="accuracy", tie_rule=tie_rule)["himo_at_k"]
    long_rows = [row for row in scores if len(row) >= 4]
    if long_rows:
        pearson = himo_at_k(long_rows, method="pearson")
        results.update({"himo@k": pearson["himo_at_k"], "himo@k_num_samples": pearson["num_samples"]})
    longest = max(len(row) for row in scores)
    results.update(num_images=len(scores), num_prefixes=sum(map(len, scores)), tie_rule=tie_rule)
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


def hierarcaps_task(dataset, encode, image_embeds, tie_rule: str = HIERARCAPS_TIE_RULE) -> dict:
    """HierarCaps hierarchical retrieval over the pool of every level text, root = the empty text; ties broken as
    the official evaluator (``"first"``) unless `tie_rule` says otherwise (`hf_longclip.metrics.hierarcaps`)."""
    chains = [list(levels) for levels in dataset["levels"]]
    texts, pool_embeds, chain_index = text_pool(chains, encode([text for chain in chains for text in chain])
                                                .reshape(len(chains), len(chains[0]), -1))
    return hierarcaps(image_embeds, pool_embeds, chain_index, encode([""])[0], tie_rule=tie_rule)


def zero_shot_task(dataset, encode, image_embeds, classnames: Sequence[str], templates: Sequence[str],
                   tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """Top-1/top-5 accuracy of the `label` column against prompt-ensembled class embeddings."""
    prompts = format_prompts(classnames, templates)
    flat = encode([prompt for group in prompts for prompt in group]).reshape(len(classnames), len(templates), -1)
    ks = (1, 5) if len(classnames) >= 5 else (1,)
    return zero_shot_classification(image_embeds, class_embeddings(flat), dataset["label"], ks=ks, tie_rule=tie_rule)


def cola_task(model, processor, dataset, encode, batch_size: int, progress: bool,
              tie_rule: str = COLA_TIE_RULE) -> dict:
    """COLA multi-object accuracy on rows with two `images` and their two `captions`; a tied comparison is wrong,
    as COLA's code (``"pessimistic"``), unless `tie_rule` says otherwise."""
    pairs = dataset["images"]
    images = encode_images(model, processor, [image for pair in pairs for image in pair], batch_size, progress)
    texts = encode([text for pair in dataset["captions"] for text in pair])
    scores = torch.einsum("nid,ncd->nic", images.reshape(len(pairs), 2, -1), texts.reshape(len(pairs), 2, -1))
    return cola_multi(scores, tie_rule=tie_rule)


def hard_negative_pairs(dataset) -> list[dict]:
    """COLA-style rows from the synthetic scenes: the two scenes of a group differ only in their last object."""
    return [{"images": [dataset[i]["image"] for i in pair], "captions": [dataset[i]["caption"] for i in pair]}
            for pair in hard_negative_indices(dataset)]


@dataclass
class TaskInputs:
    """What a task runner (`TASKS[name].runner`) receives from `evaluate_dataset`."""

    model: object
    processor: object
    dataset: object
    encode: Callable  # texts -> L2-normalised embeddings
    image_embeds: torch.Tensor | None  # of the `image` column; None when no chosen task uses it
    batch_size: int = 64
    progress: bool = False
    classnames: Sequence[str] | None = None
    templates: Sequence[str] = ("a photo of a {}.",)
    scoring: str = "global"  # the retrieval task's scoring mode (`hf_longclip.evaluation.scoring.SCORING_MODES`)
    topk: int = DEFAULT_TOPK  # texts re-scored per image by scoring "conditioned-topk"
    tie_rule: str = DEFAULT_TIE_RULE  # how the task's metric credits tied scores (`hf_longclip.metrics.ties`)


def run_retrieval(inputs: TaskInputs) -> dict:
    if inputs.scoring != "global":
        return conditioned_retrieval_task(inputs.model, inputs.processor, inputs.dataset, inputs.scoring,
                                          inputs.topk, inputs.batch_size, inputs.progress, tie_rule=inputs.tie_rule)
    return retrieval_task(inputs.dataset, inputs.encode, inputs.image_embeds, tie_rule=inputs.tie_rule)


def run_himo(inputs: TaskInputs) -> dict:
    return himo_task(inputs.dataset, inputs.encode, inputs.image_embeds, inputs.tie_rule)


def run_ssi(inputs: TaskInputs) -> dict:
    return ssi_task(inputs.dataset, inputs.encode, inputs.image_embeds)


def run_hierarcaps(inputs: TaskInputs) -> dict:
    return hierarcaps_task(inputs.dataset, inputs.encode, inputs.image_embeds, inputs.tie_rule)


def run_zero_shot(inputs: TaskInputs) -> dict:
    names = inputs.classnames or inputs.dataset.features["label"].names
    return zero_shot_task(inputs.dataset, inputs.encode, inputs.image_embeds, names, inputs.templates, inputs.tie_rule)


def run_cola(inputs: TaskInputs) -> dict:
    dataset = inputs.dataset
    rows = dataset if "images" in dataset.column_names else _Rows(hard_negative_pairs(dataset))
    return cola_task(inputs.model, inputs.processor, rows, inputs.encode, inputs.batch_size, inputs.progress,
                     inputs.tie_rule)


class _Rows:
    """Column access over a list of row dicts, the way `cola_task` reads a dataset."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, column: str):
        return [row[column] for row in self.rows]


@dataclass(frozen=True)
class EvalTask:
    """One evaluation: when it applies to a dataset and which function runs it."""

    name: str
    columns: tuple[frozenset[str], ...]  # the task applies when the rows carry every column of one of these sets
    runner: Callable[[TaskInputs], dict]  # computes the task's metrics
    description: str
    applies: Callable[[Any], bool] | None = None  # a further check on the rows, once the columns are there
    uses_image_embeds: bool = True  # reads the shared embeddings of the `image` column (else encodes its own images)

    def supported_by(self, dataset) -> bool:
        """Whether `dataset` (anything with `column_names`; a `datasets.Dataset` for the row checks) has its inputs."""
        present = set(dataset.column_names)
        return any(needed <= present for needed in self.columns) and (self.applies is None or self.applies(dataset))


def _has_two_prefixes(dataset) -> bool:
    """Some row has two caption prefixes to compare (read from the Arrow lengths: no text is decoded)."""
    lengths = pc.list_value_length(dataset.with_format("arrow")[prefix_column(dataset)])
    return (pc.max(lengths).as_py() or 0) >= 2


def _columns(*sets: str) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(names.split()) for names in sets)


TASKS: MappingProxyType[str, EvalTask] = MappingProxyType({task.name: task for task in (
    EvalTask("retrieval", _columns("image caption"), run_retrieval,
             "Recall@1/5/10 both ways and RSUM over `captions` (or the single `caption`)"),
    EvalTask("himo", _columns("image subtexts", "image sentences"), run_himo,
             "HiMo@2/3 and HiMo@K over cumulative caption prefixes (some row needs two)", applies=_has_two_prefixes),
    EvalTask("ssi", _columns("image distractor"), run_ssi,
             "Semantic Stability Index with each row's off-topic `distractor` sentence"),
    EvalTask("hierarcaps", _columns("image levels"), run_hierarcaps,
             "HierarCaps precision/recall/d_corr over the `levels` chains"),
    EvalTask("zero_shot", _columns("image label"), run_zero_shot,
             "zero-shot top-1/top-5 accuracy of the `label` column"),
    EvalTask("cola", _columns("images captions", "group_id image caption"), run_cola,
             "COLA multi-object accuracy on `images` pairs (or synthetic `group_id` hard-negative pairs)",
             uses_image_embeds=False),
)})


def available_tasks(dataset) -> tuple[str, ...]:
    """The tasks (keys of `TASKS`) whose inputs the rows of `dataset` carry, in `TASKS` order."""
    return tuple(name for name, task in TASKS.items() if task.supported_by(dataset))


def describe_tasks() -> Iterator[str]:
    """One line per task (name, the columns that enable it, description), e.g. for `--help` texts."""
    for name, task in TASKS.items():
        columns = " or ".join("+".join(sorted(needed)) for needed in task.columns)
        yield f"{name}: {task.description} [{columns}]"


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
    scoring: str = "global",
    topk: int = DEFAULT_TOPK,
    tie_rule: str | Mapping[str, str] = OFFICIAL,
    benchmark: str | None = None,
    protocol: str | None = None,
) -> dict[str, dict]:
    """Run every task of `tasks` (default: all the rows support, see `available_tasks`) and return their metrics.

    Zero-shot classification takes its `classnames` from the `label` column's ClassLabel names unless given.
    `scoring` is the retrieval task's (`hf_longclip.evaluation.scoring`): "global" (every model), "conditioned" or
    "conditioned-topk" with `topk` (a model with text-conditioned pooling: FLAIR, F-CAST); the other tasks score
    globally. `tie_rule` says how each task credits tied scores (`hf_longclip.evaluation.ties`): ``"official"``
    (default) as the evaluation code of the rows' benchmark (`benchmark`, read with `protocol`: a name of
    `hf_longclip.data.benchmarks.BENCHMARKS` and of its protocols; `official_tie_rules`): HierarCaps' and COLA's
    rules always, a retrieval protocol's where its code breaks ties by position, "fair" elsewhere; a rule name
    ("fair", "optimistic", "pessimistic", "first", "last") for every task; or {task: rule}. Each task's metrics
    record the rule they used under ``tie_rule``.
    """
    check_scoring(model, scoring, topk)
    supported = available_tasks(dataset)
    tasks = tuple(tasks) if tasks is not None else supported
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; the tasks are {list(TASKS)}")
    unsupported = [task for task in tasks if task not in supported]
    if unsupported:
        raise ValueError(f"tasks {unsupported} need columns this dataset lacks (it has {dataset.column_names}); "
                         f"possible here: {list(supported)}")
    rules = resolve_tie_rules(tie_rule, tasks, benchmark, protocol)  # checked before any encoding
    model.eval()

    def encode(texts):
        return encode_texts(model, processor, texts, batch_size, progress)

    image_embeds = None
    conditioned = {"retrieval"} if scoring != "global" else set()  # encodes its images itself, with their tokens
    if any(TASKS[task].uses_image_embeds for task in set(tasks) - conditioned):
        image_embeds = encode_images(model, processor, ImageColumn(dataset), batch_size, progress)
    inputs = TaskInputs(model, processor, dataset, encode, image_embeds, batch_size, progress, classnames, templates,
                        scoring, topk)
    return {task: TASKS[task].runner(replace(inputs, tie_rule=rules[task]))
            for task in tqdm(tasks, desc="tasks", disable=not progress)}

