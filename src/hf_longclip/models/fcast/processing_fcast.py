"""F-CAST processor: long captions -> N chunks of at most 77 tokens (App. C chunking), images -> pixels and
superpixels (CAST's image processor)."""

import random
import warnings

from hf_longclip.modeling_common.processing import DualEncoderProcessor
from hf_longclip.models.cast.image_processing_cast import CASTImageProcessor

from .chunking import TokenBudget, balanced_chunks, random_chunks


class ChunkTruncationWarning(UserWarning):
    """Part of a caption does not fit F-CAST's N chunks and is truncated."""


class FCASTProcessor(DualEncoderProcessor):
    """[`DualEncoderProcessor`] for [`FCASTModel`] with a [`CASTImageProcessor`].

    `text` is a long caption or a list of them, each chunked into `num_chunks` sub-captions (balanced chunking by
    default, the inference rule; `chunking="random"` for training, drawn from `rng`; both split sentences longer
    than a chunk by tokens, see `chunking`), or a list of lists of sub-captions already made (e.g. the K
    sub-captions of training). Balanced chunking warns (`ChunkTruncationWarning`) when a caption holds more tokens
    than its chunks, saying how many are truncated. Returns `input_ids` and `attention_mask` of
    shape (batch, chunks, tokens): every chunk is tokenized on its own, truncated to `max_length` (77) and padded
    to the longest chunk of the call (to `max_length` with `padding="max_length"`).
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

    @property
    def token_budget(self) -> TokenBudget:
        """What one chunk holds: `max_length` less the start and end tokens, counted by this tokenizer."""
        return TokenBudget(self.count_tokens, self.max_length - 2)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens of each text, without the special tokens and untruncated."""
        ids = self.tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        return [len(row) for row in ids]

    def chunk(self, caption, chunking: str = "balanced", rng: random.Random | None = None) -> list[str]:
        """The N sub-captions of one long caption (`chunking` "balanced" or "random")."""
        if chunking == "balanced":
            return balanced_chunks(caption, self.num_chunks, self.token_budget)
        if chunking == "random":
            return random_chunks(caption, self.num_chunks, rng or random.Random(), self.token_budget)
        raise ValueError(f"chunking must be 'balanced' or 'random', got {chunking!r}")

    def _warn_truncated(self, captions: list, chunked: list[list[str]]) -> None:
        """A `ChunkTruncationWarning` when the chunks this processor made (of the `str` captions) hold more tokens
        than fit: how many, of how many."""
        limit = self.max_length - 2
        made = [index for index, caption in enumerate(captions) if isinstance(caption, str)]
        lost = {index: sum(max(0, count - limit) for count in self.count_tokens(chunked[index])) for index in made}
        truncated = [index for index in made if lost[index]]
        if truncated:
            total = dict(zip(truncated, self.count_tokens([captions[index] for index in truncated])))
            first = truncated[0]
            warnings.warn(
                f"{len(truncated)} of {len(captions)} captions hold more tokens than F-CAST's {self.num_chunks} chunks "
                f"of {limit}: {sum(lost.values())} of their {sum(total.values())} tokens are truncated (caption "
                f"{first}: {lost[first]} of {total[first]})", ChunkTruncationWarning, stacklevel=3)

    def __call__(self, text=None, images=None, chunking: str = "balanced", rng: random.Random | None = None,
                 padding: bool | str = "longest", return_tensors: str | None = "pt", **kwargs):
        if text is None:
            return super().__call__(images=images, return_tensors=return_tensors, **kwargs)
        captions = [text] if isinstance(text, str) else list(text)
        if not captions:
            raise ValueError("pass at least one caption")
        chunked = [list(c) if isinstance(c, (list, tuple)) else self.chunk(c, chunking, rng) for c in captions]
        if chunking == "balanced":
            self._warn_truncated(captions, chunked)
        counts = {len(c) for c in chunked}
        if len(counts) != 1 or 0 in counts:
            raise ValueError("every caption must come as the same non-zero number of sub-captions, "
                             f"got {sorted(counts)}")
        encoding = super().__call__(text=[s for c in chunked for s in c], images=images, padding=padding,
                                    return_tensors=return_tensors, **kwargs)
        if return_tensors == "pt":
            for key in ("input_ids", "attention_mask"):
                if key in encoding:
                    encoding[key] = encoding[key].view(len(chunked), len(chunked[0]), -1)
        return encoding


__all__ = ["ChunkTruncationWarning", "FCASTProcessor"]
