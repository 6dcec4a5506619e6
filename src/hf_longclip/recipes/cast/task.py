"""Image classification for the shared loop: a task for any classifier whose forward takes `labels` and returns
`.loss` (CAST's `CASTForImageClassification`, transformers' `ViTForImageClassification`), the collate function that
runs the image processor on each batch (superpixels included, so they are computed where the data loader runs),
and top-1 accuracy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from hf_longclip.training.task import Task


class ImageClassificationCollator:
    """Rows -> model inputs: the image processor's outputs named in `input_names` (e.g. `pixel_values`, plus
    `superpixels` for CAST) for the rows' `image_column`, and `labels` from `label_fn(row)`."""

    def __init__(self, image_processor, label_fn: Callable[[dict], int], input_names: Sequence[str],
                 image_column: str = "image"):
        self.image_processor, self.label_fn = image_processor, label_fn
        self.input_names, self.image_column = tuple(input_names), image_column

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        inputs = self.image_processor([row[self.image_column] for row in rows], return_tensors="pt")
        batch = {name: inputs[name] for name in self.input_names}
        batch["labels"] = torch.tensor([self.label_fn(row) for row in rows], dtype=torch.long)
        return batch


class ClassificationTask(Task):
    """Cross-entropy of a single-label classifier's logits against the batch's `labels` (what `model(**batch).loss`
    computes for CAST's and transformers' image classifiers), logged as `cross_entropy`. With gradient caching the
    logits are per-sample, so a cached batch is plain gradient accumulation, except that a BatchNorm (CAST's
    convolutional stem) normalises over each chunk."""

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        return {"logits": model(**{key: value for key, value in batch.items() if key != "labels"}).logits}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        logits = encoded["logits"]
        return {"cross_entropy": F.cross_entropy(logits.float(), batch["labels"].to(logits.device))}


@torch.no_grad()
def accuracy(model: torch.nn.Module, collate_fn: Callable, rows, batch_size: int = 64) -> float:
    """Top-1 accuracy (%) of `model` over `rows` (a dataset or a list of rows), batched through `collate_fn`."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = total = 0
    for start in range(0, len(rows), batch_size):
        batch = collate_fn([rows[i] for i in range(start, min(start + batch_size, len(rows)))])
        labels = batch.pop("labels").to(device)
        logits = model(**{name: value.to(device) for name, value in batch.items()}).logits
        correct += int((logits.argmax(-1) == labels).sum())
        total += len(labels)
    model.train(was_training)
    if total == 0:
        raise ValueError("no rows to evaluate")
    return 100.0 * correct / total


__all__ = ["ClassificationTask", "ImageClassificationCollator", "accuracy"]
