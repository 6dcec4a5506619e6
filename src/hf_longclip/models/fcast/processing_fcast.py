"""F-CAST processor: long captions -> N chunks of at most 77 tokens (App. C chunking), images -> pixels and
superpixels (CAST's image processor)."""

import random

from hf_longclip.modeling_common.processing import DualEncoderProcessor
from hf_longclip.models.cast.image_processing_cast import CASTImageProcessor

from .chunking import balanced_chunks, random_chunks


class FCASTProcessor(DualEncoderProcessor):
    """[`DualEncoderProcessor`] for [`FCASTModel`] with a [`CASTImageProcessor`].

    `text` is a long caption or a list of them, each chunked into `num_chunks` sub-captions (balanced chunking by
    default, the inference rule; `chunking="random"` for training, drawn from `rng`), or a list of lists of
    sub-captions already made (e.g. the K sub-captions of training). Returns `input_ids` and `attention_mask` of
    shape (batch, chunks, tokens): every chunk is tokenized on its own, truncated to `max_length` (77) and padded
    to it (or to the longest chunk with `padding="longest"`).
    `images` give `pixel_values` and `superpixels` (a [`CASTImageProcessor`], the default; an image processor without
    superpixels is refused unless `needs_superpixels=False`, for a ViT vision tower, e.g. a converted FLAIR)."""

    def __init__(self, image_processor=None, tokenizer=None, max_length: int = 77, num_chunks: int = 4,
                 needs_superpixels: bool = True, **kwargs):
        if num_chunks < 1:
            raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
        if image_processor is None:
            image_processor = CASTImageProcessor()
        self.needs_superpixels = needs_superpixels
        if needs_superpixels and "superpixels" not in getattr(image_processor, "model_input_names", ()):
            raise ValueError(f"F-CAST's vision tower (CAST) needs superpixels with the pixels: use CASTImageProcessor, "
                             f"not {type(image_processor).__name__}")
        self.num_chunks = num_chunks
        super().__init__(image_processor, tokenizer, max_length=max_length, **kwargs)

    def chunk(self, caption, chunking: str = "balanced", rng: random.Random | None = None) -> list[str]:
        """The N sub-captions of one long caption (`chunking` "balanced" or "random")."""
        if chunking == "balanced":
            return balanced_chunks(caption, self.num_chunks)
        if chunking == "random":
            return random_chunks(caption, self.num_chunks, rng or random.Random())
        raise ValueError(f"chunking must be 'balanced' or 'random', got {chunking!r}")

    def __call__(self, text=None, images=None, chunking: str = "balanced", rng: random.Random | None = None,
                 padding: bool | str = "max_length", return_tensors: str | None = "pt", **kwargs):
        if text is None:
            return super().__call__(images=images, return_tensors=return_tensors, **kwargs)
        captions = [text] if isinstance(text, str) else list(text)
        if not captions:
            raise ValueError("pass at least one caption")
        chunked = [list(c) if isinstance(c, (list, tuple)) else self.chunk(c, chunking, rng) for c in captions]
        counts = {len(c) for c in chunked}
        if len(counts) != 1 or 0 in counts:
            raise ValueError(f"every caption must come as the same non-zero number of sub-captions, got {sorted(counts)}")
        encoding = super().__call__(text=[s for c in chunked for s in c], images=images, padding=padding,
                                    return_tensors=return_tensors, **kwargs)
        if return_tensors == "pt":
            for key in ("input_ids", "attention_mask"):
                if key in encoding:
                    encoding[key] = encoding[key].view(len(chunked), len(chunked[0]), -1)
        return encoding


__all__ = ["FCASTProcessor"]
