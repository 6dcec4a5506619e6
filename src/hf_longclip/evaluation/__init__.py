"""Evaluate any CLIP-style model (ours, or a plain transformers `CLIPModel`) on a dataset in the sample schema.

    report = evaluate_dataset(model, processor, dataset)           # {task: metrics}, see `TASKS`
    hf-longclip eval --model PATH_OR_ID --dataset urban1k --data-dir data/Urban1k --output-dir eval/urban1k

`encoding` (embeddings), `tasks` (what each task computes, the registry and `evaluate_dataset`), `scoring` (the
retrieval task's scoring modes: global, or FLAIR's text-conditioned ones), `long_captions` (the long-caption
evaluation several models' miniature protocols share: R@1 both ways, recall by caption length), `loading` (the model
`hf-longclip eval` reads), `report` (`run_evaluation`, the command, and the metric names of its report) and `ties`
(the tie rule each benchmark protocol's own code applies; how ties count is `hf_longclip.metrics.ties`, the metrics'
own arithmetic). What is particular to one method's protocol lives in its recipe:
`hf_longclip.recipes.<arch>.evaluation`.
"""

from .encoding import cached_text_encoder, encode_images, encode_texts, text_max_length
from .loading import load_model
from .long_captions import evaluate_text_lengths, late_difference_pairs, recall_at_1_both_ways
from .report import load_report, run_evaluation
from .tasks import (
    TASKS,
    EvalTask,
    TaskInputs,
    available_tasks,
    cola_task,
    cxc_positive_sets,
    cxc_task,
    describe_tasks,
    evaluate_dataset,
    hard_negative_pairs,
    hierarcaps_task,
    himo_task,
    prefix_column,
    prefix_scores,
    retrieval_task,
    ssi_task,
    zero_shot_task,
)

__all__ = [
    "TASKS",
    "EvalTask",
    "TaskInputs",
    "available_tasks",
    "cached_text_encoder",
    "cola_task",
    "cxc_positive_sets",
    "cxc_task",
    "describe_tasks",
    "encode_images",
    "encode_texts",
    "evaluate_dataset",
    "evaluate_text_lengths",
    "hard_negative_pairs",
    "hierarcaps_task",
    "himo_task",
    "late_difference_pairs",
    "load_model",
    "load_report",
    "prefix_column",
    "prefix_scores",
    "recall_at_1_both_ways",
    "retrieval_task",
    "run_evaluation",
    "ssi_task",
    "text_max_length",
    "zero_shot_task",
]
