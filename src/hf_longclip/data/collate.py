"""Batch collation for image-text training."""

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ImageTextCollator:
    """Turns rows with an image and a caption into model inputs, padding texts to the batch's longest; with
    `index_column`, also `sample_index`, the rows' values there (their dataset indices, for per-sample state such
    as PO-HNM's queues)."""

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
            )
        )
        if self.index_column is not None and self.index_column in rows[0]:  # training rows; validation rows lack it
            batch["sample_index"] = torch.tensor([row[self.index_column] for row in rows])
        return batch


@dataclass
class MultiCaptionCollator:
    """Rows of one image and several captions -> one batch with `captions_per_image` captions of each image, as DITM's
    ordering loss needs (Eq. 6: pairs of positive captions of one image in the batch).

    Each image is encoded once: `pixel_values` has one row per image, the texts `captions_per_image` rows per image,
    with `text_image_index` (the text's row of `pixel_values`), `image_ids` (the row's `id_column`, unique across
    processes) and `descriptiveness` (the captions' scores, aligned with `caption_column`). An image with fewer
    captions than `captions_per_image` is an error. Which captions are drawn depends only on `seed` and the ids in
    the batch (numpy's generator seeded by them), so a resumed run draws the same captions as an uninterrupted one
    and a shuffled epoch draws anew.
    """

    processor: object
    captions_per_image: int = 2
    caption_column: str = "captions"
    descriptiveness_column: str = "descriptiveness"
    image_column: str = "image"
    id_column: str = "image_id"
    seed: int = 0

    def __post_init__(self):
        if self.captions_per_image < 2:
            raise ValueError(f"captions_per_image must be >= 2 (pairs of captions of one image), got "
                             f"{self.captions_per_image}")

    def __call__(self, rows: list[dict]) -> dict:
        missing = {self.caption_column, self.descriptiveness_column, self.id_column, self.image_column} - set(rows[0])
        if missing:
            raise ValueError(f"rows lack the column(s) {sorted(missing)} (streamed shards carry the columns of the "
                             f"dataset they were written from: shard one that has them)")
        ids = [int(row[self.id_column]) for row in rows]
        rng = np.random.default_rng([self.seed, *ids])
        texts, scores, text_image_index, image_ids = [], [], [], []
        for index, (row, image_id) in enumerate(zip(rows, ids)):
            captions, deltas = row[self.caption_column], row[self.descriptiveness_column]
            if len(captions) < self.captions_per_image:
                raise ValueError(f"image {image_id} has {len(captions)} captions, fewer than captions_per_image="
                                 f"{self.captions_per_image}")
            for choice in rng.choice(len(captions), self.captions_per_image, replace=False):
                texts.append(captions[choice])
                scores.append(deltas[choice])
            text_image_index += [index] * self.captions_per_image
            image_ids += [image_id] * self.captions_per_image
        batch = dict(self.processor(text=texts, images=[row[self.image_column] for row in rows], padding="longest"))
        batch.update(descriptiveness=torch.tensor(scores, dtype=torch.float32),
                     text_image_index=torch.tensor(text_image_index), image_ids=torch.tensor(image_ids))
        return batch
