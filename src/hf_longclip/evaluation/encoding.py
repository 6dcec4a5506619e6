"""L2-normalised text and image embeddings of any CLIP-style model (ours, or a plain transformers `CLIPModel`), batch
by batch, texts truncated to what the processor says."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

UNSET_MAX_LENGTH = 1_000_000  # a tokenizer `model_max_length` at least this large means "not set" (transformers: 1e30)


def text_max_length(processor, model=None) -> int:
    """The number of tokens `processor` truncates texts to: its own `max_length` (our processors), else its
    tokenizer's `model_max_length` (77 for real CLIP checkpoints). Only when the tokenizer leaves that unset is the
    model's `text_config.max_position_embeddings` read, if it has one; a tokenizer's length is also capped by it, when
    present (a RoPE model has no such table and is never capped)."""
    if getattr(processor, "max_length", None) is not None:
        return processor.max_length
    config = getattr(getattr(model, "config", None), "text_config", getattr(model, "config", None))
    positions = getattr(config, "max_position_embeddings", None)
    tokenizer_length = getattr(getattr(processor, "tokenizer", processor), "model_max_length", None)
    if tokenizer_length is not None and tokenizer_length < UNSET_MAX_LENGTH:
        return min(tokenizer_length, positions) if positions is not None else tokenizer_length
    if positions is not None:
        return positions
    raise ValueError(f"cannot tell how many tokens to truncate texts to: {type(processor).__name__} has no "
                     f"`max_length`, its tokenizer's `model_max_length` is unset ({tokenizer_length}) and the "
                     f"model's text config has no `max_position_embeddings`; set `processor.tokenizer."
                     f"model_max_length`")


def text_inputs(model, processor, texts: list[str]):
    """Tokenised `texts` padded to the longest, truncated to what the processor says (see `text_max_length`): our
    processors truncate themselves (and are told that the empty text, HierarCaps' root, is meant) and count what
    they cut in `truncation_stats`; a plain CLIPProcessor is told, keeps the end-of-text token, and its cuts are
    counted here, in the same attribute (`truncation_stats`)."""
    if getattr(processor, "max_length", None) is not None:
        return processor(text=texts, padding="longest", allow_empty_text=True)
    max_length = text_max_length(processor, model)
    inputs = processor(text=texts, padding="longest", truncation=True, return_tensors="pt", max_length=max_length)
    from ..modeling_common.captions import new_truncation_stats, record_truncation, tokens_cut

    tokenizer = getattr(processor, "tokenizer", processor)
    stats = processor.__dict__.setdefault("truncation_stats", new_truncation_stats(max_length))
    record_truncation(stats, tokens_cut(tokenizer, texts, inputs["input_ids"], inputs.get("attention_mask"),
                                        max_length), max_length)
    return inputs


def reset_truncation_stats(processor) -> None:
    """Start counting the texts `processor` cuts afresh (`truncation_stats`)."""
    from ..modeling_common.captions import new_truncation_stats

    processor.__dict__["truncation_stats"] = new_truncation_stats(getattr(processor, "max_length", None))


def truncation_stats(processor) -> dict:
    """The texts `processor` tokenized since `reset_truncation_stats`, how many it cut and by how much."""
    from ..modeling_common.captions import new_truncation_stats

    return dict(processor.__dict__.get("truncation_stats") or new_truncation_stats(getattr(processor, "max_length",
                                                                                           None)))


@torch.no_grad()
def _encode(items, embed: Callable, batch_size: int, progress: bool, description: str,
            normalize: bool = True) -> torch.Tensor:
    """L2-normalised (unless `normalize=False`) float32 embeddings of `items` (a list or a `datasets` column, read
    batch by batch so images are decoded only when needed), `embed` applied to each batch."""
    starts = tqdm(range(0, len(items), batch_size), desc=description, disable=not progress, leave=False)
    embeddings = torch.cat([embed(list(items[i : i + batch_size])).float().cpu() for i in starts])
    return F.normalize(embeddings, dim=-1) if normalize else embeddings


def retrieval_texts(dataset) -> tuple[list[str], list[int]]:
    """The texts a retrieval task encodes, every row's `captions` in order (or its single `caption`), and the row
    (image) each belongs to."""
    if "captions" in dataset.column_names:
        groups = dataset["captions"]
        return [text for group in groups for text in group], [i for i, group in enumerate(groups) for _ in group]
    return dataset["caption"], list(range(len(dataset)))


def encode_texts(model, processor, texts: Sequence[str], batch_size: int = 128, progress: bool = False,
                 normalize: bool = True) -> torch.Tensor:
    """L2-normalised text embeddings (CPU float32); `normalize=False`: the model's `pooler_output` as it is (the
    query of a text-conditioned pooling, which FLAIR gives unnormalised)."""

    def embed(batch):
        return model.get_text_features(**text_inputs(model, processor, batch).to(model.device)).pooler_output

    return _encode(texts, embed, batch_size, progress, "texts", normalize)


def cached_text_encoder(model, processor, batch_size: int = 128, progress: bool = False) -> Callable:
    """`encode(texts)` for the evaluation tasks that remembers each list it encoded, so tasks scoring the same texts
    (HiMo@K's and SSI's caption prefixes, HierarCaps' levels and their distances) encode them once."""
    encoded = {}

    def encode(texts):
        key = tuple(texts)
        if key not in encoded:
            encoded[key] = encode_texts(model, processor, texts, batch_size, progress)
        return encoded[key]

    return encode


def encode_images(model, processor, images, batch_size: int = 128, progress: bool = False) -> torch.Tensor:
    """L2-normalised image embeddings (CPU float32); `images` is a list or a `datasets` image column. Each batch is
    converted to 8-bit RGB by `to_rgb_images` (16-bit images scaled, transparency composited onto white), the same
    conversion our processors apply, so a plain `CLIPProcessor` is given the same images."""

    def embed(batch):
        return model.get_image_features(**image_inputs(model, processor, batch)).pooler_output

    return _encode(images, embed, batch_size, progress, "images")


def image_inputs(model, processor, images: list):
    """The processor's inputs of `images` (converted to 8-bit RGB by `to_rgb_images`) on the model's device."""
    from ..modeling_common.images import to_rgb_images

    return processor(images=to_rgb_images(images), return_tensors="pt").to(model.device)


class ImageColumn:
    """A dataset's `image` column read lazily, slice by slice (so a 30k-image benchmark is never decoded whole)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index: slice):
        return self.dataset[index]["image"]
