"""The evaluation tasks, in one ordered registry used by `hf_longclip.evaluation`, the benchmark loaders
(`hf_longclip.data.benchmarks`, `Benchmark.tasks`) and `hf-longclip eval --tasks`.

    TASKS["himo"].columns      # the column sets that enable the task (any one of them)
    available_tasks(dataset)   # the tasks a dataset's rows support, in registry order

Light on purpose (no torch): the loaders import it. Each entry names its runner, a function of
`hf_longclip.evaluation` that takes a `TaskInputs` and returns the task's metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pyarrow.compute as pc


@dataclass(frozen=True)
class EvalTask:
    """One evaluation: when it applies to a dataset and which function runs it."""

    name: str
    columns: tuple[frozenset[str], ...]  # the task applies when the rows carry every column of one of these sets
    runner: str  # the function of `hf_longclip.evaluation` that runs it: `runner(inputs: TaskInputs) -> dict`
    description: str
    applies: Callable[[Any], bool] | None = None  # a further check on the rows, once the columns are there
    uses_image_embeds: bool = True  # reads the shared embeddings of the `image` column (else encodes its own images)

    def supported_by(self, dataset) -> bool:
        """Whether `dataset` (anything with `column_names`; a `datasets.Dataset` for the row checks) has its inputs."""
        present = set(dataset.column_names)
        return any(needed <= present for needed in self.columns) and (self.applies is None or self.applies(dataset))


def prefix_column(dataset) -> str:
    """The column holding each row's caption prefixes: `subtexts` if given (HiMo-Docci), else `sentences`."""
    return "subtexts" if "subtexts" in dataset.column_names else "sentences"


def _has_two_prefixes(dataset) -> bool:
    """Some row has two caption prefixes to compare (read from the Arrow lengths: no text is decoded)."""
    lengths = pc.list_value_length(dataset.with_format("arrow")[prefix_column(dataset)])
    return (pc.max(lengths).as_py() or 0) >= 2


def _columns(*sets: str) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(names.split()) for names in sets)


TASKS: MappingProxyType[str, EvalTask] = MappingProxyType({task.name: task for task in (
    EvalTask("retrieval", _columns("image caption"), "run_retrieval",
             "Recall@1/5/10 both ways and RSUM over `captions` (or the single `caption`)"),
    EvalTask("himo", _columns("image subtexts", "image sentences"), "run_himo",
             "HiMo@2/3 and HiMo@K over cumulative caption prefixes (some row needs two)", applies=_has_two_prefixes),
    EvalTask("ssi", _columns("image distractor"), "run_ssi",
             "Semantic Stability Index with each row's off-topic `distractor` sentence"),
    EvalTask("hierarcaps", _columns("image levels"), "run_hierarcaps",
             "HierarCaps precision/recall/d_corr over the `levels` chains"),
    EvalTask("zero_shot", _columns("image label"), "run_zero_shot",
             "zero-shot top-1/top-5 accuracy of the `label` column"),
    EvalTask("cola", _columns("images captions", "group_id image caption"), "run_cola",
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


__all__ = ["TASKS", "EvalTask", "available_tasks", "describe_tasks", "prefix_column"]
