"""HiMo-CLIP's training task: MoLo (Eq. 4) over the global batch, HiDe's in-batch PCA of the text embeddings, with
the paper's formula or the official code's recipe; and its baseline, Long-CLIP's fine-tuning (`LongCLIPTask`)."""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.modeling_common.positions import KeptRowsEmbedding
from hf_longclip.modeling_common.text import split_sentences
from hf_longclip.models.himo_clip.objective import HIDE_MODALITIES, HIDE_SCOPES, MoLoLoss
from hf_longclip.objectives.longclip import LONGCLIP_COMPONENTS, LONGCLIP_LABEL_SMOOTHING, LongCLIPLoss
from hf_longclip.training.task import ContrastiveTask, gathered

# MoLo's options of each recipe. "paper": Eq. 1-4 as written. "released": what the official training computes
# (github.com/UnicomAI/HiMo-CLIP, model/model_himo.py `CLIP.forward` and train/run_scripts/run_train.sh at commit
# f235e973a29014e640ef437ccf02b334d3a4bef6): HiDe per process with pca_ratio 0.9, its reconstruction scored as it is
# (mean added back, not re-normalised), the gathered features without gradient, label smoothing 0.1, lambda 1.
RECIPES = {
    "paper": dict(hide_tau=0.9, molo_lambda=1.0, hide_scope="global", label_smoothing=0.0, hide_modalities="text",
                  molo_global=True, normalize_components=True, gather_grad=True),
    "released": dict(hide_tau=0.9, molo_lambda=1.0, hide_scope="local", label_smoothing=0.1, hide_modalities="text",
                     molo_global=True, normalize_components=False, gather_grad=False),
}


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


class HiMoCLIPTask(KeptPositionsTask):
    """A HiMo-CLIP (or any dual encoder) trained with `MoLoLoss`; `molo_lambda=0` is plain CLIP training with the
    global InfoNCE alone (the CLIP-77 / CLIP-248 baselines).

    recipe: "paper" (Eq. 1-4 as written, the default) or "released" (the official training's choices, see
        `RECIPES` and docs/models/himo_clip.md): sets every option below that is not given; a given one overrides it.
    hide_tau: HiDe's explained-variance threshold tau (Sec. 3.2): m is the smallest number of principal components
        whose cumulative explained variance reaches it.
    molo_lambda: weight lambda of the component loss (Eq. 4).
    hide_scope: "global", HiDe's PCA over the whole gathered batch (the paper's batch of 1024 spans 8 GPUs: the
        result does not depend on the number of processes), or "local", each process's own batch as the official
        code does, components gathered afterwards as negatives.
    label_smoothing: of both InfoNCE cross-entropies (the paper: none; the official code: 0.1).
    hide_modalities: "text" (the paper's method) or "both", which also decomposes the image embeddings (Table 5's
        L_comp^{u,v}).
    molo_global: keep the global term (Eq. 2); False trains on the component loss alone (Table 5's L_comp).
    normalize_components: score the images against the re-normalised HiDe components (the paper's cosine
        similarity); False scores the reconstruction as it is, mean added back (the official code).
    gather_grad: the gathered batch carries gradient into every process and both towers; False makes it a
        constant, as the official code's plain `dist.all_gather` (each cross-entropy trains its local side only).

    Text position rows kept frozen by the model are restored after every step (`KeptPositionsTask`).
    """

    def __init__(self, model: nn.Module, collate_fn: Callable, hide_tau: float | None = None,
                 molo_lambda: float | None = None, hide_scope: str | None = None, label_smoothing: float | None = None,
                 hide_modalities: str | None = None, molo_global: bool | None = None,
                 normalize_components: bool | None = None, gather_grad: bool | None = None, recipe: str = "paper"):
        if recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {list(RECIPES)}, got {recipe!r}")
        given = dict(hide_tau=hide_tau, molo_lambda=molo_lambda, hide_scope=hide_scope,
                     label_smoothing=label_smoothing, hide_modalities=hide_modalities, molo_global=molo_global,
                     normalize_components=normalize_components, gather_grad=gather_grad)
        options = {**RECIPES[recipe], **{name: value for name, value in given.items() if value is not None}}
        if not 0.0 < options["hide_tau"] <= 1.0:
            raise ValueError(f"hide_tau must be in (0, 1], got {options['hide_tau']}")
        if options["molo_lambda"] < 0:
            raise ValueError(f"molo_lambda must be >= 0, got {options['molo_lambda']}")
        if not 0.0 <= options["label_smoothing"] < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {options['label_smoothing']}")
        if options["hide_scope"] not in HIDE_SCOPES:
            raise ValueError(f"hide_scope must be one of {HIDE_SCOPES}, got {options['hide_scope']!r}")
        if options["hide_modalities"] not in HIDE_MODALITIES:
            raise ValueError(f"hide_modalities must be one of {HIDE_MODALITIES}, got {options['hide_modalities']!r}")
        if not options["molo_global"] and options["molo_lambda"] == 0:
            raise ValueError("molo_global=False needs molo_lambda > 0: there would be no loss")
        super().__init__(model, collate_fn, MoLoLoss(
            options["hide_tau"], options["molo_lambda"], options["hide_scope"], options["label_smoothing"],
            options["hide_modalities"], options["molo_global"], options["normalize_components"],
            options["gather_grad"]))

    def options(self) -> dict:
        objective = self.objective
        return dict(hide_tau=objective.tau, molo_lambda=objective.weight, hide_scope=objective.scope,
                    label_smoothing=objective.label_smoothing, hide_modalities=objective.modalities,
                    molo_global=objective.use_global, normalize_components=objective.normalize_components,
                    gather_grad=objective.gather_grad)


SHORT_PREFIX = "short_"  # the batch keys of the short captions' token ids and mask


def first_sentence(caption: str) -> str:
    """The short caption Long-CLIP pairs with a long one: its first sentence (`caption.split(". ")[0]` of the
    release's ShareGPT4V loader; here split by `split_sentences`, keeping the full stop)."""
    sentences = split_sentences(caption)
    return sentences[0] if sentences else caption


@dataclass
class FirstSentenceCollator(ImageTextCollator):
    """`ImageTextCollator` plus `short_input_ids` / `short_attention_mask`: each caption's first sentence
    (`first_sentence`), padded to the longest of them (Long-CLIP pads them to 248 tokens; CLIP's causal text encoder
    gives the same embedding at any padding, and a short caption costs its own length, not the long one's)."""

    def __call__(self, rows: list[dict]) -> dict:
        batch = super().__call__(rows)
        short = self.processor(text=[first_sentence(row[self.text_column]) for row in rows], padding="longest")
        for key in ("input_ids", "attention_mask"):
            batch[SHORT_PREFIX + key] = short[key]
        return batch


class LongCLIPTask(KeptPositionsTask):
    """Long-CLIP's fine-tuning (Zhang et al., ECCV 2024), HiMo-CLIP's baseline: `LongCLIPLoss` over the images, the
    long captions and their first sentences (batches of `FirstSentenceCollator`), text position rows 0-19 kept as
    the model's config says (`KeptPositionsTask`; converted and stretched models keep them).

    num_components: the principal components of the images' features the short captions are matched to (32).
    label_smoothing: of every cross-entropy (0.1, as released).
    """

    def __init__(self, model: nn.Module, collate_fn: Callable, num_components: int = LONGCLIP_COMPONENTS,
                 label_smoothing: float = LONGCLIP_LABEL_SMOOTHING):
        super().__init__(model, collate_fn, LongCLIPLoss(num_components, label_smoothing))

    def encode(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        """The forward over the images and long captions (the DDP / ZeRO call), then the text tower over the short
        captions at their own length; autograd sums both uses of the text weights before DDP's gradient hooks fire."""
        missing = [SHORT_PREFIX + key for key in ("input_ids", "attention_mask") if SHORT_PREFIX + key not in batch]
        if missing:
            raise ValueError(f"LongCLIPTask needs the short captions' {missing} (batches of FirstSentenceCollator)")
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

    def options(self) -> dict:
        return dict(objective="longclip", pca_components=self.objective.num_components,
                    label_smoothing=self.objective.label_smoothing)


__all__ = ["RECIPES", "FirstSentenceCollator", "HiMoCLIPTask", "KeptPositionsTask", "LongCLIPTask"]
