"""Push a saved checkpoint to the Hub with a model card filled from the run's config and measured eval results.

    card = build_model_card(CARD.template, repo_id="org/himo-clip", info=CARD, base_model=None,
                            datasets=[], config=model.config, training_args=training_args,
                            results=results["himo-clip"], dataset_name="synthetic scenes (test)")
    entries = training_eval_results(results["himo-clip"], "org/himo-clip", model.config.to_dict())
    url = push_to_hub(output_dir / "himo-clip", "org/himo-clip", card=card, eval_results=entries)  # main process
    push_eval_results("org/himo-clip", report_eval_results(report, source_url))  # an `hf-longclip eval` report

The card's YAML metadata (license, library_name, pipeline_tag, tags, datasets, base_model, model-index) is built
with `ModelCardData(eval_results=[EvalResult(...)])`, so it is what the Hub validates and indexes. Beside it, the
Hub's newer evaluation results: one `.eval_results/<benchmark>_<metric>.yaml` per benchmark and metric, written by
huggingface_hub's own `eval_result_entries_to_yaml` (dataset id and task id, value, date, source with the protocol:
split, text length, tie rule).

`push_to_hub` never touches the checkpoint folder: it stages a copy (hard links where possible) with the card as
README.md, creates the repo (exist_ok) and commits the stage in one `HfApi.create_commit`. Transient failures (5xx,
408, 429, connection errors, timeouts) of either call are retried whole with exponential backoff: huggingface_hub
retries some requests itself (`http_backoff`: the preupload, LFS transfers) but sends create_repo, the card's YAML
check and the commit once (a retried commit whose answer was lost would commit twice), whereas a whole create_commit
re-run commits nothing twice (files already there are left out). Anything else (401/403 auth, 404, 400/422
validation, an invalid card) raises at once. It makes network calls and writes nothing shared, so call it from the
main process only (`if accelerator.is_main_process:`): other ranks would push the same commit again. The endpoint is
huggingface_hub's (`HF_ENDPOINT`, read when huggingface_hub is imported) unless `endpoint=` is given.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import (
    CommitOperationAdd,
    EvalResult,
    EvalResultEntry,
    HfApi,
    ModelCard,
    ModelCardData,
    constants,
    eval_result_entries_to_yaml,
)
from huggingface_hub.constants import EVAL_RESULTS_FOLDER
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.utils import filter_repo_objects, yaml_dump

from ..versions import CHECKPOINTS_LOAD_ON

logger = logging.getLogger(__name__)

DEFAULT_TAGS = ("hf-longclip", "clip", "long-captions", "image-text-retrieval", "custom_code")
# results key -> human-readable metric name (the model-index metric type is the key itself unless overridden)
METRIC_NAMES = {"r1_i2t": "R@1 image→text", "r1_t2i": "R@1 text→image"}


@dataclasses.dataclass(frozen=True)
class ModelCardInfo:
    """What a model's own package tells the card: its tags, the display names of its metrics, the rows of the
    training table read from its config and its task's options (label -> keys, shown joined by " / "), and its task
    (the Hub pipeline tag and the evaluation's name)."""

    template: Path | None = None
    tags: tuple[str, ...] = ()
    metric_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    config_rows: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    task_type: str = "zero-shot-image-classification"
    task_name: str = "Long-caption image-text retrieval"
RETRY_STATUS = (408, 429)  # besides every 5xx
STAGED_IGNORE = ("__pycache__", "*.pyc", ".git", ".tmp-*")


def _as_dict(obj: Any) -> dict:
    if obj is None:
        return {}
    if hasattr(obj, "to_dict"):  # PretrainedConfig, TrainingArguments-like objects
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return dict(obj)


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _hub_id(name: str | None) -> str | None:
    """`name` if it can be a Hub repo id (the Hub rejects metadata naming anything else), None for local paths."""
    if name and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) and not os.path.exists(name):
        return name
    return None


def _setup_rows(config: dict, training_args: dict, base_model: str | None, datasets: Sequence[str],
                dataset_name: str, config_rows: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """The 'Training' table: what was trained, on what, with which objective and optimisation settings."""
    text, vision = config.get("text_config") or {}, config.get("vision_config") or {}
    rows: list[tuple[str, Any]] = [
        ("initialised from", "scratch (random initialisation)" if not base_model else
         f"[{base_model}](https://huggingface.co/{base_model})" if _hub_id(base_model) else f"`{base_model}`"),
        ("training data", ", ".join(datasets) or dataset_name),
        ("text positions", text.get("max_position_embeddings")),
    ]
    if text and vision:
        rows.append(("encoders (layers x width)",
                     f"text {text.get('num_hidden_layers')} x {text.get('hidden_size')}, vision "
                     f"{vision.get('num_hidden_layers')} x {vision.get('hidden_size')} (patch "
                     f"{vision.get('patch_size')}, {vision.get('image_size')} px), projection "
                     f"{config.get('projection_dim')}"))
    for label, keys in config_rows.items():
        if keys[0] in config:
            rows.append((label, " / ".join(str(config.get(key)) for key in keys)))
    max_steps = training_args.get("max_steps")
    if max_steps is not None and max_steps > 0:
        rows.append(("optimizer steps", max_steps))
    elif "num_train_epochs" in training_args:
        rows.append(("epochs", training_args["num_train_epochs"]))
    if "per_device_train_batch_size" in training_args:
        batch = f"{training_args['per_device_train_batch_size']} per device"
        if training_args.get("contrastive_batch_size"):
            batch = f"{training_args['contrastive_batch_size']} per device (gradient caching, chunks of " \
                    f"{training_args['per_device_train_batch_size']})"
        if training_args.get("gradient_accumulation_steps", 1) > 1:
            batch += f" x {training_args['gradient_accumulation_steps']} accumulation steps"
        rows.append(("batch", batch))
    for key, label in (("learning_rate", "learning rate"), ("weight_decay", "weight decay"),
                       ("warmup_steps", "warmup steps"), ("mixed_precision", "mixed precision"), ("seed", "seed")):
        if training_args.get(key) is not None:
            rows.append((label, training_args[key]))
    return [(name, _format_value(value)) for name, value in rows if value is not None and value != ""]


def build_model_card(
    template_path: str | os.PathLike,
    *,
    repo_id: str,
    info: ModelCardInfo = ModelCardInfo(),
    results: Mapping[str, Any],
    config: Any = None,
    training_args: Any = None,
    base_model: str | None = None,
    datasets: Sequence[str] = (),
    dataset_name: str = "synthetic long-caption scenes",
    dataset_type: str | None = None,
    dataset_split: str | None = "test",
    metric_types: Mapping[str, str] | None = None,
    model_name: str | None = None,
    license: str = "apache-2.0",
    **template_kwargs: Any,
) -> ModelCard:
    """Render the Jinja model card at `template_path` for one trained checkpoint.

    `results` maps metric keys to values (e.g. `evaluate_long_captions` output: {"r1_i2t": 20.3, "himo@k": 0.88,
    ...}); finite numbers become `EvalResult`s in the card's `model-index` (one task/dataset entry: `info.task_type`,
    `dataset_type` (default: `datasets[0]`, else a slug of `dataset_name`), `dataset_name`, `dataset_split`), other
    values (lists, NaN) and counts (`num_*` keys) are left out. Each metric's type is `metric_types.get(key, key)`
    and its display name `info.metric_names` / `METRIC_NAMES` / the key; `info` (from the model's package) also
    adds its tags and config rows. `config` (a PretrainedConfig or dict) and `training_args` (a dataclass or dict)
    fill the training table. `base_model` goes into the metadata only if it can be a Hub id
    (a local directory is named in the prose only). `template_kwargs` are passed to the template as they are.
    """
    config, training_args = _as_dict(config), _as_dict(training_args)
    names = {**METRIC_NAMES, **info.metric_names}
    metric_types = metric_types or {}
    dataset_type = dataset_type or (datasets[0] if datasets else "-".join(dataset_name.lower().split()))
    model_name = model_name or repo_id.split("/")[-1]
    task_type, task_name = info.task_type, info.task_name

    rows, eval_results = [], []
    for key, value in results.items():
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or key.startswith("num_")):  # counts say what was measured; they are no metric
            continue
        value = float(value)
        rows.append({"key": key, "name": names.get(key, key), "type": metric_types.get(key, key), "value": value,
                     "display": _format_value(value)})
        eval_results.append(EvalResult(
            task_type=task_type, task_name=task_name, dataset_type=dataset_type, dataset_name=dataset_name,
            dataset_split=dataset_split, metric_type=metric_types.get(key, key), metric_name=names.get(key, key),
            metric_value=value,
        ))

    card_data = ModelCardData(
        license=license,
        library_name="transformers",
        pipeline_tag=task_type,
        tags=list(dict.fromkeys([*DEFAULT_TAGS, *info.tags])),
        datasets=list(datasets) or None,
        base_model=_hub_id(base_model),
        model_name=model_name if eval_results else None,  # the model-index name; no stray key without results
        eval_results=eval_results or None,
    )
    scalar_args = {k: _format_value(v) for k, v in sorted(training_args.items())
                   if isinstance(v, (str, int, float, bool)) or v is None}
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path),
        repo_id=repo_id,
        model_name=model_name,
        base_model=base_model,
        datasets=list(datasets),
        dataset_name=dataset_name,
        dataset_split=dataset_split,
        task_name=task_name,
        setup=_setup_rows(config, training_args, base_model, datasets, dataset_name, info.config_rows),
        training_args=scalar_args,
        results=rows,
        config=config,
        tested_transformers=CHECKPOINTS_LOAD_ON,
        **template_kwargs,
    )


# the Hub dataset of each benchmark `hf-longclip eval` reads, for the `.eval_results/` files (others: their own name)
HUB_DATASETS = {"urban1k": "BeichenZhang/Urban1k", "docci": "google/docci", "sharegpt4v": "Lin-Chen/ShareGPT4V",
                "flickr30k": "nlphuji/flickr30k", "coco": "nlphuji/mscoco_2014_5k_test_image_text_retrieval"}


def _metric_values(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of `metrics` that are metrics (not counts `num_*`, tie counts `ties_*` nor booleans)."""
    return {key: float(value) for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and not key.startswith(("num_", "ties_"))}


def eval_result_entries(results: Mapping[str, Any], *, dataset_id: str, protocol: str, source_url: str,
                        task: str | None = None, date: str | None = None) -> list[EvalResultEntry]:
    """One Hub `EvalResultEntry` per metric of `results` (``{metric: value}``; counts, tie counts and non-numbers
    left out): ``dataset_id`` the benchmark's Hub dataset, ``task_id`` the metric (``<task>/<metric>`` with `task`),
    ``source`` `source_url` named by `protocol` (what was measured how: split, text length, tie rule), ``date``
    today (UTC, ISO 8601) unless given."""
    date = date or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [EvalResultEntry(dataset_id=dataset_id, task_id=f"{task}/{key}" if task else key, value=value, date=date,
                            source_url=source_url, source_name=protocol, notes=protocol)
            for key, value in _metric_values(results).items()]


def report_eval_results(report: Mapping[str, Any], source_url: str, date: str | None = None,
                        dataset_id: str | None = None) -> list[EvalResultEntry]:
    """The `eval_result_entries` of a `hf-longclip eval` report (`hf_longclip.evaluation.run_evaluation`): every
    task's metrics, on the benchmark's Hub dataset (`HUB_DATASETS`, else `dataset_id`, else the benchmark's name),
    the protocol in the source: benchmark protocol, split, texts cut at N tokens, the tie rule of each task."""
    benchmark = report["dataset"]
    dataset_id = dataset_id or HUB_DATASETS.get(benchmark, benchmark)
    length = (report.get("caption_truncation") or {}).get("max_length")
    entries = []
    for task, metrics in report["metrics"].items():
        protocol = (f"hf-longclip eval: {benchmark} (protocol {report.get('protocol') or 'default'}, split "
                    f"{report.get('split')}, {report.get('num_samples')} samples), texts cut at {length} tokens, "
                    f"ties {metrics.get('tie_rule', report.get('tie_rule'))}, scoring {report.get('scoring')}")
        entries += eval_result_entries(metrics, dataset_id=dataset_id, protocol=protocol, source_url=source_url,
                                       task=task, date=date)
    return entries


def training_eval_results(results: Mapping[str, Any], repo_id: str, config: Mapping[str, Any],
                          dataset_name: str = "synthetic long-caption scenes", dataset_split: str = "test",
                          date: str | None = None) -> list[EvalResultEntry]:
    """The `eval_result_entries` of a training run's own evaluation (`results`: one variant's metrics, as its card's
    model-index has them), on the dataset the card names (its slug, as `build_model_card`'s default dataset type),
    sourced to the model repo, the protocol naming the split, the text positions and the tie rule."""
    positions = (config.get("text_config") or {}).get("max_position_embeddings")
    protocol = (f"hf-longclip training run's evaluation: {dataset_name} ({dataset_split}), texts up to {positions} "
                f"tokens, ties {results.get('tie_rule', 'fair')}")
    return eval_result_entries(results, dataset_id="-".join(dataset_name.lower().split()), protocol=protocol,
                               source_url=f"{constants.ENDPOINT}/{repo_id}", date=date)


def eval_results_files(entries: Sequence[EvalResultEntry]) -> dict[str, str]:
    """``{path in the repo: YAML}``: one `.eval_results/<dataset>_<task>.yaml` per entry (per benchmark and metric),
    in the Hub's format (`huggingface_hub.eval_result_entries_to_yaml`)."""
    files = {}
    for entry in entries:
        stem = re.sub(r"[^\w.@-]+", "_", f"{entry.dataset_id.split('/')[-1]}_{entry.task_id}").lower()
        files[f"{EVAL_RESULTS_FOLDER}/{stem}.yaml"] = yaml_dump(eval_result_entries_to_yaml([entry]))
    return files


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection errors and timeouts of whichever HTTP client huggingface_hub uses (httpx2 or httpx, by version)."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(__import__(module).TransportError)
        except ImportError:
            continue
    return tuple(errors)


def is_transient(error: BaseException) -> bool:
    """Whether retrying could help: 5xx / 408 / 429 answers, connection errors, timeouts. Never 4xx auth or
    validation errors (401, 403, 404, 400, 422) nor a card the Hub rejects (a ValueError)."""
    if isinstance(error, OfflineModeIsEnabled):  # a ConnectionError, but HF_HUB_OFFLINE=1 will not go away
        return False
    if isinstance(error, HfHubHTTPError):
        status = getattr(error.response, "status_code", None)
        return status is not None and (status >= 500 or status in RETRY_STATUS)
    return isinstance(error, _transport_errors())


def _with_retries(what: str, call, max_retries: int, backoff: float, max_backoff: float):
    for attempt in range(max_retries + 1):
        try:
            return call()
        except Exception as error:
            if attempt == max_retries or not is_transient(error):
                raise
            delay = min(max_backoff, backoff * 2**attempt)
            logger.warning("%s failed (%s: %s); retry %d/%d in %.1f s", what, type(error).__name__,
                           str(error).splitlines()[0] if str(error) else "", attempt + 1, max_retries, delay)
            time.sleep(delay)


def _link_or_copy(src: str, dst: str) -> None:
    """Hard link (instant, and the upload only reads) or copy where links are impossible (other filesystem)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    card: ModelCard | str | None,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload checkpoint with hf-longclip",
    commit_description: str | None = None,
    revision: str | None = None,
    max_retries: int = 3,
    backoff: float = 2.0,
    max_backoff: float = 60.0,
    ignore_patterns: Sequence[str] = (),
    endpoint: str | None = None,
    eval_results: Sequence[EvalResultEntry] = (),
) -> str:
    """Upload the checkpoint `folder` (weights, config, code files, processor/tokenizer files) to `repo_id` with
    `card` as README.md and `eval_results` as the Hub's `.eval_results/` files (`eval_results_files`: one per
    benchmark and metric), and return the commit URL.

    The folder is never modified: the card goes into a staged copy (README.md from the folder, if any, is replaced
    there). Creates the repo if needed (`private` only applies then). Each Hub call is retried up to `max_retries`
    times on transient errors, waiting `backoff * 2**attempt` seconds (at most `max_backoff`); re-running an upload
    is safe (unchanged files are not committed again). Auth and validation errors raise immediately. Call from the
    main process only.
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a saved checkpoint (no config.json)")
    api = HfApi(endpoint=endpoint, token=token)
    _with_retries(f"create_repo({repo_id})",
                  lambda: api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model"),
                  max_retries, backoff, max_backoff)
    with tempfile.TemporaryDirectory(prefix="hf-longclip-push-") as temp:
        stage = Path(temp) / "checkpoint"
        shutil.copytree(folder, stage, ignore=shutil.ignore_patterns(*STAGED_IGNORE), copy_function=_link_or_copy)
        if card is not None:
            readme = stage / "README.md"
            if readme.exists():
                logger.warning("%s/README.md is replaced by the model card in the upload", folder)
                readme.unlink()  # a hard link: unlink, never write through it into the checkpoint
            readme.write_text(str(card), encoding="utf-8")
        for name, text in eval_results_files(eval_results).items():
            (stage / name).parent.mkdir(exist_ok=True)
            (stage / name).write_text(text, encoding="utf-8")
        # One commit with every file. `upload_folder` would hand a folder of more than 20 files (a bundle with its
        # shared code) to huggingface_hub's pipeline, which splits failed commits into smaller ones and retries
        # them whatever the error: a checkpoint could land half-written, and auth errors would be retried.
        files = filter_repo_objects(sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file()),
                                    ignore_patterns=list(ignore_patterns) or None)
        operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(stage / name)) for name in files]
        commit = _with_retries(
            f"create_commit({repo_id})",
            lambda: api.create_commit(repo_id=repo_id, operations=operations, repo_type="model", revision=revision,
                                      commit_message=commit_message, commit_description=commit_description),
            max_retries, backoff, max_backoff,
        )
    logger.info("pushed %s to %s", folder, commit.commit_url)
    return commit.commit_url


def push_eval_results(repo_id: str, entries: Sequence[EvalResultEntry], *, token: str | None = None,
                      commit_message: str = "Add evaluation results with hf-longclip", revision: str | None = None,
                      max_retries: int = 3, backoff: float = 2.0, max_backoff: float = 60.0,
                      endpoint: str | None = None) -> str:
    """Commit `entries` as `.eval_results/` files (`eval_results_files`) to the existing model repo `repo_id` (the
    checkpoint and its card as they are; a file of the same benchmark and metric is replaced) and return the commit
    URL. Retries as `push_to_hub`."""
    if not entries:
        raise ValueError("no evaluation results to push")
    api = HfApi(endpoint=endpoint, token=token)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=text.encode())
                  for name, text in eval_results_files(entries).items()]
    commit = _with_retries(
        f"create_commit({repo_id})",
        lambda: api.create_commit(repo_id=repo_id, operations=operations, repo_type="model", revision=revision,
                                  commit_message=commit_message),
        max_retries, backoff, max_backoff,
    )
    logger.info("pushed %d evaluation results to %s", len(entries), commit.commit_url)
    return commit.commit_url
