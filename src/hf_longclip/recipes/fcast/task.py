"""F-CAST's training task: batches of B images, each with K sub-captions, the first N the random chunks of its long
caption (App. C), the other K - N chunks of its other captions (Sec. 3.3, Eq. 4), and the two-level sigmoid loss
(Eq. 6-8), or FLAIR's flat loss for Table 2's baseline rows."""

import hashlib
import logging
import random
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from hf_longclip.data.superpixels import given_superpixels
from hf_longclip.models.fcast.chunking import sample_sub_captions
from hf_longclip.objectives.fcast import FCASTLoss, FLAIRLoss
from hf_longclip.objectives.losses import gather_with_grad, sigmoid_loss
from hf_longclip.training.task import ContrastiveTask

logger = logging.getLogger(__name__)

OBJECTIVES = ("fcast", "flair")


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
                                    rng, self.processor.token_budget) for row in rows]
        return dict(self.processor(text=subs, images=[row["image"] for row in rows], padding="longest",
                                   **given_superpixels(rows)))


class FCASTTask(ContrastiveTask):
    """An `FCASTModel` trained with the two-level loss (`objective="fcast"`, `FCASTLoss`: L = part_loss_weight L_part
    + L_whole; weight 0 is Table 5's "F-CAST w/o part alignment") or with FLAIR's flat loss (`objective="flair"`,
    `FLAIRLoss`: the global image against its sub-captions (and t^long with the hierarchical encoder), one temperature
    and bias, the whole level's). Batches hold K >= N sub-captions per image (`FCASTCollator`). Parameters the
    objective does not use are frozen (DDP rejects parameters without gradient). The whole level's logit scale is
    clamped as CLIP's after every optimizer step.

    `nonpaper_detach_stage1_from_part_loss=True` (NOT the paper's, default off: a diagnostic of docs/models/fcast.md's
    reading of Table 5) keeps L_part's gradient out of the hierarchical encoder's stage 1: t^sub (Eq. 1-2) enters
    L_part as the text projection of the stage-1 output detached, so L_part still trains the projection, the pooling,
    the part level and the vision tower, while stage 1 learns from L_whole alone (through the adapter and stage 2)."""

    def __init__(self, model: torch.nn.Module, collate_fn, objective: str = "fcast", part_loss_weight: float = 1.0,
                 nonpaper_detach_stage1_from_part_loss: bool = False):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}")
        if part_loss_weight < 0:
            raise ValueError(f"part_loss_weight must be >= 0, got {part_loss_weight}")
        if objective == "flair" and part_loss_weight != 1.0:
            raise ValueError("part_loss_weight weighs F-CAST's L_part; FLAIR's flat loss has no such weight (keep 1.0)")
        if nonpaper_detach_stage1_from_part_loss and not (
                objective == "fcast" and part_loss_weight and model.config.text_config.is_hierarchical):
            raise ValueError("nonpaper_detach_stage1_from_part_loss keeps L_part's gradient out of the hierarchical "
                             "text encoder's stage 1: it needs objective='fcast', part_loss_weight > 0 and a "
                             "hierarchical text encoder")
        super().__init__(model, collate_fn, FCASTLoss(part_loss_weight) if objective == "fcast" else FLAIRLoss())
        self.objective_name, self.part_loss_weight = objective, part_loss_weight
        self.nonpaper_detach_stage1_from_part_loss = nonpaper_detach_stage1_from_part_loss
        if objective == "flair":  # one temperature and bias, the whole level's
            unused = (model.part_logit_scale, model.part_logit_bias)
        else:
            unused = () if part_loss_weight else (model.grounding_pool, model.part_logit_scale, model.part_logit_bias)
        for module in unused:
            module.requires_grad_(False)
        self._zero3_ready = False

    def _gather_pool_weights_with_it(self) -> None:
        """Under ZeRO-3 every weight is partitioned outside its module's forward. The objective calls the model's
        grounding pool after the model's forward, and `nn.MultiheadAttention` reads its `out_proj` weights without
        calling `out_proj`, so ZeRO-3 would hand it empty shards: register them as parameters of the attention
        module, which then gathers them whenever it runs (DeepSpeed's `register_external_parameter`)."""
        attention = self.model.grounding_pool.attention
        if hasattr(attention.out_proj.weight, "ds_id"):
            from deepspeed.runtime.zero.partition_parameters import register_external_parameter

            for param in attention.out_proj.parameters():
                register_external_parameter(attention, param)
        self._zero3_ready = True

    def options(self) -> dict:
        return {"objective": self.objective_name, "part_loss_weight": self.part_loss_weight,
                "nonpaper_detach_stage1_from_part_loss": self.nonpaper_detach_stage1_from_part_loss}

    @contextmanager
    def _sub_captions_detached_from_stage1(self):
        """While the model runs (with `nonpaper_detach_stage1_from_part_loss`): the text projection's input is
        detached where it is the stage-1 output of every chunk, (batch, chunks, width), which gives t^sub and so only
        L_part (Eq. 1-2, 7); its (batch, width) input, stage 2's t^long (Eq. 3), keeps its gradient. Inside the
        forward, so that DDP and DeepSpeed see the projection run as usual."""
        def detach_chunk_states(module, args):
            return (args[0].detach(),) if args[0].dim() == 3 else None

        handle = (self.model.text_projection.register_forward_pre_hook(detach_chunk_states)
                  if self.nonpaper_detach_stage1_from_part_loss else None)
        try:
            yield
        finally:
            if handle is not None:
                handle.remove()

    shared_outputs = ("logit_scale", "logit_bias", "part_logit_scale", "part_logit_bias")

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor | None]:
        """Image, long-caption and sub-caption embeddings, the tokens sub-captions ground in (and their padding), and
        both levels' temperatures and biases."""
        with self._sub_captions_detached_from_stage1():
            outputs = model(**batch)
        sub_embeds = outputs.text_model_output.sub_caption_embeds
        subs, chunks = sub_embeds.shape[1], self.model.config.text_config.num_chunks
        if subs < chunks:
            raise ValueError(f"training needs K >= N sub-captions per image (the first N are the long caption's "
                             f"chunks), got K = {subs} < N = {chunks}")
        tokens, padding = self.model.grounding_tokens(outputs.vision_model_output)
        return {"image_embeds": outputs.image_embeds, "text_embeds": outputs.text_embeds, "sub_embeds": sub_embeds,
                "grounding_tokens": tokens, "grounding_padding": padding, "logit_scale": outputs.logit_scale,
                "logit_bias": outputs.logit_bias, "part_logit_scale": outputs.part_logit_scale,
                "part_logit_bias": outputs.part_logit_bias}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        if not self._zero3_ready:  # once: the weights are partitioned when the loop prepares the model
            self._gather_pool_weights_with_it()
        tokens = encoded["grounding_tokens"], encoded["grounding_padding"]
        pool = self.model.grounding_pool
        if self.objective_name == "flair":  # the global image against its sub-captions (and t^long)
            long_embeds = encoded["text_embeds"] if self.model.config.text_config.is_hierarchical else None
            return self.objective(encoded["image_embeds"], encoded["sub_embeds"], long_embeds, *tokens, pool,
                                  encoded["logit_scale"], encoded["logit_bias"])
        return self.objective(encoded["image_embeds"], encoded["text_embeds"], encoded["sub_embeds"], *tokens, pool,
                              encoded["part_logit_scale"], encoded["part_logit_bias"], encoded["logit_scale"],
                              encoded["logit_bias"])


class FCASTPretrainingTask(ContrastiveTask):
    """A flat-text `FCASTModel` pretrained as the short-caption base the variants fine-tune: the whole level's
    sigmoid loss (Eq. 8) of each image's global embedding against one caption per image (`ImageTextCollator`), texts
    gathered from every process. The text-conditioned pooling and the part level are left out (frozen): what the base
    gives the variants is its two towers and projections."""

    shared_outputs = ("logit_scale", "logit_bias")

    def __init__(self, model: torch.nn.Module, collate_fn):
        if model.config.text_config.is_hierarchical:
            raise ValueError("the pretrained base has the flat text encoder (its first layers start the hierarchical "
                             "encoder's stage 1)")
        super().__init__(model, collate_fn)
        for module in (model.grounding_pool, model.part_logit_scale, model.part_logit_bias):
            module.requires_grad_(False)

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        outputs = model(**batch)
        return {"image_embeds": outputs.image_embeds, "text_embeds": outputs.text_embeds,
                "logit_scale": outputs.logit_scale, "logit_bias": outputs.logit_bias}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        all_text, offset = gather_with_grad(encoded["text_embeds"])
        return {"whole_loss": sigmoid_loss(encoded["image_embeds"], all_text, encoded["logit_scale"],
                                           encoded["logit_bias"], offset)}


#: weights a variant does not take from its pretrained base: the pooling and part level the base never trained
NOT_FROM_BASE = ("grounding_pool.", "part_logit_")


def start_from_base(model: torch.nn.Module, base: torch.nn.Module) -> list[str]:
    """Copy into `model` every weight of the pretrained `base` (`FCASTPretrainingTask`) that `model` has under the
    same name and shape, except `NOT_FROM_BASE`: both towers and projections, the hierarchical encoder's stage 1
    from the flat encoder's first layers. Returns the names of `model`'s weights left at their initialisation (the
    hierarchical stage 2 and adapter, the pooling, the part level), and logs the modules they belong to."""
    own, given = model.state_dict(), base.state_dict()
    taken = {name: value for name, value in given.items()
             if name in own and own[name].shape == value.shape and not name.startswith(NOT_FROM_BASE)}
    model.load_state_dict(taken, strict=False)
    left = sorted(set(own) - set(taken))
    logger.info("started from the base; at their initialisation (`_init_weights`): %s",
                ", ".join(sorted({name.split(".")[0] for name in left})))
    return left


__all__ = ["FCASTCollator", "FCASTPretrainingTask", "FCASTTask", "start_from_base"]
