"""Long-CLIP's fine-tuning (Zhang et al., ECCV 2024), the baseline HiMo-CLIP, OneLIP and DITM's scripts compare with,
and what every task over a model with frozen text position rows shares (`KeptPositionsTask`)."""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.modeling_common.positions import KeptRowsEmbedding
from hf_longclip.modeling_common.text import split_sentences
from hf_longclip.objectives.longclip import LONGCLIP_COMPONENTS, LONGCLIP_LABEL_SMOOTHING, LongCLIPLoss
from hf_longclip.training.task import ContrastiveTask, gathered


def kept_position_table(model: nn.Module) -> KeptRowsEmbedding | None:
    """The model's text position table if it keeps rows frozen (`HiMoCLIPConfig.frozen_position_rows`), else None."""
    text_model = getattr(model, "text_model", None)
    table = getattr(getattr(text_model, "embeddings", None), "position_embedding", None)
    return table if isinstance(table, KeptRowsEmbedding) and table.kept_rows else None


class KeptPositionsTask(ContrastiveTask):
    """A contrastive task whose model may keep text position rows frozen (`HiMoCLIPConfig.frozen_position_rows`,
    Long-CLIP's fine-tuning): they get no gradient from the model, and after each optimizer step the task writes back
    their values from the start of training, so AdamW's decoupled weight decay leaves them unchanged too, as the
    official code's `requires_grad=False` does."""

    def __init__(self, model: nn.Module, collate_fn: Callable, objective: nn.Module):
        super().__init__(model, collate_fn, objective)
        table = kept_position_table(model)
        if table is not None:
            with gathered(table.weight), torch.no_grad():
                self.kept_positions = table.weight[:table.kept_rows].detach().clone()

    def after_optimizer_step(self, model: nn.Module, accelerator: Accelerator) -> dict:
        table = kept_position_table(accelerator.unwrap_model(model))
        if table is not None:
            with gathered(table.weight, modifier_rank=0), torch.no_grad():
                if self.kept_positions.device != table.weight.device:  # once, after the model moved
                    self.kept_positions = self.kept_positions.to(table.weight.device)
                table.weight[:table.kept_rows].copy_(self.kept_positions)
        return super().after_optimizer_step(model, accelerator)


SHORT_PREFIX = "short_"  # the batch keys of the short captions' token ids and mask


def first_sentence(caption: str) -> str:
    """The short caption Long-CLIP pairs with a long one: its first sentence (`caption.split(". ")[0]` of the
    release's ShareGPT4V loader; here split by `split_sentences`, keeping the full stop)."""
    sentences = split_sentences(caption)
    return sentences[0] if sentences else caption


@dataclass
class FirstSentenceCollator(ImageTextCollator):
    """`ImageTextCollator` plus `short_input_ids` / `short_attention_mask`: each caption's first sentence
    (`first_sentence`, or the function `short_caption`), padded to the longest of them (Long-CLIP pads them to 248
    tokens; CLIP's causal text encoder gives the same embedding at any padding, and a short caption costs its own
    length, not the long one's)."""

    short_caption: Callable[[str], str] = first_sentence

    def __call__(self, rows: list[dict]) -> dict:
        batch = super().__call__(rows)
        short = self.processor(text=[self.short_caption(row[self.text_column]) for row in rows], padding="longest")
        for key in ("input_ids", "attention_mask"):
            batch[SHORT_PREFIX + key] = short[key]
        return batch


class FirstSentenceTask(KeptPositionsTask):
    """A contrastive task over the images, the long captions and their first sentences (batches of
    `FirstSentenceCollator`): `objective(image_embeds, text_embeds, short_text_embeds, logit_scale)`."""

    def encode(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        """The forward over the images and long captions (the DDP / ZeRO call), then the text tower over the short
        captions at their own length; autograd sums both uses of the text weights before DDP's gradient hooks fire."""
        missing = [SHORT_PREFIX + key for key in ("input_ids", "attention_mask") if SHORT_PREFIX + key not in batch]
        if missing:
            raise ValueError(f"{type(self).__name__} needs the short captions' {missing} (batches of "
                             "FirstSentenceCollator)")
        outputs = model(**{key: value for key, value in batch.items() if not key.startswith(SHORT_PREFIX)})
        unwrapped = getattr(model, "module", model)  # DDP's and DeepSpeed's engines hold the model as `.module`
        short = unwrapped.get_text_features(batch[SHORT_PREFIX + "input_ids"],
                                            attention_mask=batch[SHORT_PREFIX + "attention_mask"])
        long_text, short_text = outputs.text_embeds, F.normalize(short.pooler_output, dim=-1)
        return {"image_embeds": outputs.image_embeds, "text_embeds": long_text, "short_text_embeds": short_text,
                "logit_scale": outputs.logit_scale}

    def loss(self, model: nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        return self.objective(encoded["image_embeds"], encoded["text_embeds"], encoded["short_text_embeds"],
                              encoded["logit_scale"])


class LongCLIPTask(FirstSentenceTask):
    """Long-CLIP's fine-tuning (Zhang et al., ECCV 2024), HiMo-CLIP's baseline: `LongCLIPLoss` over the images, the
    long captions and their first sentences (batches of `FirstSentenceCollator`), text position rows 0-19 kept as
    the model's config says (`KeptPositionsTask`; converted and stretched models keep them).

    num_components: the principal components of the images' features the short captions are matched to (32).
    label_smoothing: of every cross-entropy (0.1, as released).
    """

    def __init__(self, model: nn.Module, collate_fn: Callable, num_components: int = LONGCLIP_COMPONENTS,
                 label_smoothing: float = LONGCLIP_LABEL_SMOOTHING):
        super().__init__(model, collate_fn, LongCLIPLoss(num_components, label_smoothing))

    def options(self) -> dict:
        return dict(objective="longclip", pca_components=self.objective.num_components,
                    label_smoothing=self.objective.label_smoothing)


__all__ = ["FirstSentenceCollator", "FirstSentenceTask", "KeptPositionsTask", "LongCLIPTask", "first_sentence"]
