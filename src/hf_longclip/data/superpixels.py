"""Superpixels computed once per image and kept in the dataset, for CAST's processor to take instead of computing
them again in every epoch and every run (SEEDS costs about as much as a small model's step on a CPU).

    train = with_superpixels(dataset["train"], image_processor)   # a `superpixels` column, cached by `datasets`
    collator = ImageTextCollator(processor)                       # rows with the column pass it to the processor
"""

import numpy as np

COLUMN = "superpixels"


def with_superpixels(dataset, image_processor, image_column: str = "image", batch_size: int = 64):
    """`dataset` with a `superpixels` column: each image's ids as `image_processor` (a `CASTImageProcessor`) computes
    them, read back as numpy arrays (the other columns unchanged). `datasets` caches the column beside a dataset
    read from files, keyed by the processor's settings, so later runs skip the work."""

    def compute(batch):
        return {COLUMN: list(image_processor(batch[image_column], return_tensors="np")[COLUMN].astype(np.int32))}

    mapped = dataset.map(compute, batched=True, batch_size=batch_size, desc="superpixels")
    return mapped.with_format("numpy", columns=[COLUMN], output_all_columns=True)


def given_superpixels(rows: list[dict]) -> dict:
    """The processor keyword for rows that carry precomputed superpixels (`with_superpixels`); {} for rows without."""
    return {COLUMN: [row[COLUMN] for row in rows]} if rows and COLUMN in rows[0] else {}


__all__ = ["COLUMN", "given_superpixels", "with_superpixels"]
