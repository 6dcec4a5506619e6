"""The processor every dual-encoder model of the library shares: CLIP image preprocessing plus a tokenizer that
truncates to the model's text positions and pads to the batch's longest text, with the caption checks of
`modeling_common.captions` and the image conversion of `modeling_common.images`."""

from transformers import BatchEncoding, ProcessorMixin

from hf_longclip.modeling_common.captions import (
    check_texts,
    new_truncation_stats,
    record_truncation,
    tokens_cut,
    warn_unknown_tokens,
)
from hf_longclip.modeling_common.images import to_rgb_images
from hf_longclip.modeling_common.saving import CodeBundleMixin
from hf_longclip.modeling_common.transformers_compat import ProcessorParts, save_processor_parts


class DualEncoderProcessor(CodeBundleMixin, ProcessorParts, ProcessorMixin):
    """Prepares `input_ids`/`attention_mask` (at most `max_length` tokens, end-of-text kept last when truncating;
    padded to the longest text of the call, as `CLIPProcessor`) and `pixel_values` for a dual-encoder model.

    Captions must be non-empty strings; images may be PIL images of any mode (16-bit included), numpy arrays or
    torch tensors (HxW, HxWxC, CxHxW), converted to 8-bit RGB by `modeling_common.images.to_rgb_images`. The first
    time most of a caption's tokens are unknown to the tokenizer, an `UnknownTokensWarning` names the rate (once per
    processor).

    `truncation_stats` counts, over the processor's life, the texts tokenized, how many truncation cut and by how
    many tokens (`modeling_common.captions.new_truncation_stats`); `hf-longclip eval` and the training loop reset it
    and report it once per run."""

    def __init__(self, image_processor=None, tokenizer=None, max_length: int = 77, **kwargs):
        if max_length < 2:
            raise ValueError(f"max_length must leave room for the start and end tokens, got {max_length}")
        self.max_length = max_length
        self._unknown_tokens_warned = False  # not an `__init__` argument, so never saved
        self.truncation_stats = new_truncation_stats(max_length)  # neither is this
        super().__init__(image_processor, tokenizer, **kwargs)

    def __call__(
        self,
        text: str | list[str] | None = None,
        images=None,
        padding: bool | str = "longest",
        truncation: bool = True,
        return_tensors: str | None = "pt",
        allow_empty_text: bool = False,
        superpixels=None,
        **kwargs,
    ) -> BatchEncoding:
        """Tokenize `text` (truncated to `self.max_length` tokens) and/or preprocess `images`.

        Texts are padded to the longest of the call; `padding="max_length"` pads every text to `self.max_length`
        (the same features: the text towers attend causally and pool at the end-of-text token).
        An empty or whitespace-only caption is refused (ValueError naming its index) unless `allow_empty_text=True`
        (the empty text's embedding on purpose, e.g. HierarCaps's root). `superpixels`: the images' precomputed
        superpixel ids, for an image processor that computes them (CAST's), taken instead of computing them again.
        """
        if text is None and images is None:
            raise ValueError("pass `text`, `images` or both")
        if superpixels is not None and images is None:
            raise ValueError("`superpixels` are the given images' (precomputed): pass the images too")
        if superpixels is not None and "superpixels" not in getattr(self.image_processor, "model_input_names", ()):
            raise ValueError(f"`superpixels` given, but {type(self.image_processor).__name__} uses none (CAST's "
                             f"image processor does)")
        encoding = BatchEncoding(tensor_type=return_tensors)
        if text is not None:
            check_texts(text, allow_empty=allow_empty_text)
            has_unk = getattr(self.tokenizer, "unk_token_id", None) is not None
            watch = has_unk and not getattr(self, "_unknown_tokens_warned", False)  # checked until it warns once
            keep_special_mask = kwargs.pop("return_special_tokens_mask", False)
            tokens = self.tokenizer(
                text,
                padding=padding,
                truncation=truncation,
                max_length=self.max_length,
                return_tensors=return_tensors,
                return_special_tokens_mask=keep_special_mask or watch,
                **{"return_token_type_ids": False, **kwargs},  # the models take none (4.57's fast tokenizers give them)
            )
            if watch:
                special = tokens["special_tokens_mask"] if keep_special_mask else tokens.pop("special_tokens_mask")
                self._unknown_tokens_warned = warn_unknown_tokens(
                    self.tokenizer, tokens["input_ids"], special, tokens.get("attention_mask")
                )
            rows = [tokens["input_ids"]] if isinstance(text, str) and return_tensors is None else tokens["input_ids"]
            length = max((len(row) for row in rows), default=0)
            if length > self.max_length:
                raise ValueError(
                    f"texts of {length} tokens exceed the model's {self.max_length} positions; keep truncation=True"
                )
            if truncation not in (False, None, "do_not_truncate"):
                cuts = tokens_cut(self.tokenizer, text, tokens["input_ids"], tokens.get("attention_mask"),
                                  self.max_length)
                stats = self.__dict__.setdefault("truncation_stats", new_truncation_stats(self.max_length))
                record_truncation(stats, cuts, self.max_length)
            encoding.update(tokens)
        if images is not None:
            given = {} if superpixels is None else {"superpixels": superpixels}  # precomputed: CAST's processor
            encoding.update(self.image_processor(to_rgb_images(images), return_tensors=return_tensors, **given))
        return encoding

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' `save_pretrained`, in the layout every release reads (`save_processor_parts`)."""
        result = super().save_pretrained(save_directory, *args, **kwargs)
        save_processor_parts(self, save_directory)
        return result

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)


__all__ = ["DualEncoderProcessor"]
