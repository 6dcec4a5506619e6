"""DITM's training task: batches of several graded captions per image (`MultiCaptionCollator`), the adaptive triplet
+ ordering objective (Eq. 7) and its warm-up (Sec. IV-C.2)."""

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator

from hf_longclip.objectives.ditm import DITMLoss
from hf_longclip.training.task import Task


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


class DITMTask(Task):
    """DITM's objective (`hf_longclip.objectives.ditm.DITMLoss`, Eq. 7) on any of our dual encoders (DITM, HiMo-CLIP,
    OneLIP): the model's forward gives the L2-normalised embeddings, the task pairs each text with its image
    (`text_image_index`) and applies the objective with the batch's `image_ids` and `descriptiveness`
    (`MultiCaptionCollator` builds such batches). `margin_scale` is tau of the adaptive margins (Eq. 4: the margins
    are (delta(t) + delta(t^-)) / tau and 2 delta(t) / tau), `order_weight` lambda of the ordering loss (Eq. 7; 0
    trains with the adaptive triplet loss alone).

    Warm-up (Sec. IV-C.2, "we freeze the visual backbone and include the hardest negative mining except for the
    first two epochs"): for the first `warmup_steps` optimizer steps the triplet loss sums over all negatives and
    the parameters of the vision transformer (`vision_model.*`; pooling and projection still train) get no
    gradient, so the optimizer leaves them untouched. Under DDP this needs `ddp_find_unused_parameters`. The step
    count is task state, saved with every checkpoint.
    """

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, margin_scale: float = 6.0,
                 order_weight: float = 0.07, warmup_steps: int = 0):
        if margin_scale <= 0:
            raise ValueError(f"margin_scale (tau) must be positive, got {margin_scale}")
        if order_weight < 0:
            raise ValueError(f"order_weight must be >= 0, got {order_weight}")
        super().__init__(model, collate_fn, DITMLoss(margin_scale, order_weight))
        self.warmup_steps, self.steps_done = warmup_steps, 0
        self._vision_parameters = [param for name, param in model.named_parameters()
                                   if "vision_model." in name and param.requires_grad]

    def options(self) -> dict:
        return {"margin_scale": self.objective.tau, "order_weight": self.objective.order_weight,
                "warmup_steps": self.warmup_steps}

    @property
    def warming_up(self) -> bool:
        return self.steps_done < self.warmup_steps

    def prepare_step(self, model: torch.nn.Module, batch: dict) -> dict:
        """During the warm-up the vision transformer gets no gradient (switched here, outside the compiled step)."""
        warming_up = self.warming_up
        if self._vision_parameters and self._vision_parameters[0].requires_grad == warming_up:  # at a switch only
            for param in self._vision_parameters:
                param.requires_grad_(not warming_up)
        return batch

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        """One embedding per image (`pixel_values` row) and one per text."""
        outputs = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"),
                        pixel_values=batch["pixel_values"])
        return {"image_embeds": outputs.image_embeds, "text_embeds": outputs.text_embeds}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        missing = [key for key in ("descriptiveness", "text_image_index", "image_ids") if key not in batch]
        if missing:
            raise ValueError(f"DITM's batches carry each text's descriptiveness (Eq. 1-2), its image's row and id; "
                             f"this one lacks {missing}: collate with MultiCaptionCollator")
        self.objective.hardest_negatives = not self.warming_up
        return self.objective(encoded["image_embeds"][batch["text_image_index"]], encoded["text_embeds"],
                              batch["image_ids"], batch["descriptiveness"])

    def split_batch(self, batch: dict, size: int) -> list[dict]:
        """Chunks of `size` images, each with its texts (`MultiCaptionCollator` lists them image after image)."""
        owners = batch["text_image_index"].tolist()
        if owners != sorted(owners):
            raise ValueError("gradient caching needs the texts of a DITM batch in the order of their images "
                             "(as MultiCaptionCollator lists them)")
        chunks = []
        for start in range(0, len(batch["pixel_values"]), size):
            first, end = bisect.bisect_left(owners, start), bisect.bisect_left(owners, start + size)
            chunks.append({"pixel_values": batch["pixel_values"][start:start + size],
                           **{key: batch[key][first:end] for key in ("input_ids", "attention_mask") if key in batch}})
        return chunks

    def after_optimizer_step(self, model: torch.nn.Module, accelerator: Accelerator) -> dict[str, float]:
        self.steps_done += 1
        return {"warm_up": float(self.steps_done <= self.warmup_steps)}

    def state_dict(self) -> dict:
        return {"steps_done": self.steps_done}

    def load_state_dict(self, state: dict) -> None:
        self.steps_done = state["steps_done"]


__all__ = ["DITMTask", "MultiCaptionCollator"]
