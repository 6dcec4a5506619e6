"""Batch collation for image-text training shared by the models: one caption per image."""

from dataclasses import dataclass

import torch

from .superpixels import given_superpixels


@dataclass
class ImageTextCollator:
    """Turns rows with an image and a caption into model inputs, padding texts to the batch's longest; with
    `index_column`, also `sample_index`, the rows' values there (their dataset indices, for per-sample state such
    as PO-HNM's queues). Rows with a `superpixels` column (precomputed, `hf_longclip.data.superpixels`) pass it to
    the processor, which then does not compute them again."""

    processor: object
    text_column: str = "caption"
    image_column: str = "image"
    index_column: str | None = None

    def __call__(self, rows: list[dict]) -> dict:
        batch = dict(
            self.processor(
                text=[row[self.text_column] for row in rows],
                images=[row[self.image_column] for row in rows],
                padding="longest",
                **given_superpixels(rows),
            )
        )
        if self.index_column is not None and self.index_column in rows[0]:  # training rows; validation rows lack it
            batch["sample_index"] = torch.tensor([row[self.index_column] for row in rows])
        return batch
