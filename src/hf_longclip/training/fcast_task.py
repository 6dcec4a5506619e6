"""F-CAST's training batches (Sec. 3.3, Eq. 4): B images, each with K sub-captions, the first N the random chunks of
its long caption (App. C), the other K - N chunks of its other captions."""

import hashlib
import random
from dataclasses import dataclass

from ..models.fcast.chunking import sample_sub_captions
from .task import ContrastiveTask


@dataclass
class FCASTCollator:
    """Rows with `image`, `caption` and `captions` -> `FCASTProcessor` inputs with K sub-captions per image
    (`input_ids` (B, K, 77)), the first `num_chunks` (default: the processor's N) the random chunks of the long
    caption. A flat-text baseline (N = 1) given `num_chunks=4` trains on the very sub-captions F-CAST sees. Which chunks
    are drawn depends only on `seed` and the batch's captions (a generator seeded by their digest, as
    `MultiCaptionCollator` seeds by ids): a resumed run, with or without data-loader workers, draws the same
    sub-captions as an uninterrupted one, and a reshuffled epoch draws anew."""

    processor: object
    num_sub_captions: int = 8
    seed: int = 0
    num_chunks: int | None = None

    def __post_init__(self):
        self.num_chunks = self.num_chunks or self.processor.num_chunks
        if self.num_sub_captions < self.num_chunks:
            raise ValueError(f"K = {self.num_sub_captions} sub-captions per image is smaller than N = "
                             f"{self.num_chunks} chunks: the first N are the long caption's")

    def __call__(self, rows: list[dict]) -> dict:
        key = "\n".join([str(self.seed), *(row["caption"] for row in rows)])
        rng = random.Random(hashlib.sha256(key.encode()).digest())
        subs = [sample_sub_captions([row["caption"], *row["captions"][1:]], self.num_chunks, self.num_sub_captions,
                                    rng) for row in rows]
        return dict(self.processor(text=subs, images=[row["image"] for row in rows], padding="longest"))


class FCASTTask(ContrastiveTask):
    """F-CAST trained with its two-level loss (`FCASTModel.forward(return_loss=True)`); the whole level's logit
    scale is clamped as CLIP's after every optimizer step."""


__all__ = ["FCASTCollator", "FCASTTask"]
