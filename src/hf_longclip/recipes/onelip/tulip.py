"""TULIP's two-stage adaptation (Najdenkoska et al., "TULIP: Token-length Upgraded CLIP"), the multi-stage pipeline
OneLIP's one stage is compared with, as its release trains it (ivonajdenkoska/tulip at commit 132c174; paths below are
in that repository, under `open_clip/`):

1. distillation (`training/main_distill_rope.py`, `training/train_distill.py`): a RoPE text encoder
   (`TextTransformerRoPE`, 248 positions) built from the CLIP text encoder learns to reproduce the frozen CLIP's
   projected text embedding (`encode_text`) of the same captions, cut at the teacher's 77 tokens; the image tower is
   untouched. Loss `cosine` (the release's run script), `mse` or `l2` (`distillation_loss`);
2. contrastive fine-tuning (`training/main_context_finetune_rope.py`, `training/train.py`) of the distilled text
   encoder with CLIP's image tower on captions tokenised at 600 tokens, the rotary frequencies NTK-scaled from the
   student's 248 positions to 600: CLIP's loss on the long captions plus CLIP's loss on their first sentences
   (`TULIPLoss`).

Both stages train an `OneLIPModel` (CLIP's image tower and a RoPE text encoder, the architecture of TULIP's
`TextTransformerRoPE`, see `convert_tulip`). What the release does, and the option of each function here that follows
it (its default is the release's; another value is the library's earlier choice):

- the student's activation is `TextTransformerRoPE`'s default, exact GELU (`transformer_rope.py:986`,
  `act_layer=nn.GELU`; `training/main_distill_rope.py:249-254` passes none), not CLIP's
  QuickGELU: `distillation_student(activation=)`;
- its rotary forward (`transformer_rope.py:77-102`, `apply_rotary_emb`) rotates consecutive pairs (2i, 2i + 1) of each
  head of CLIP's query and key rows as they are (`training/main_distill_rope.py:256-259` copies them); this model
  rotates the halves (i, i + d/2), so the student's query and key rows are permuted per head as `convert_tulip`
  permutes released weights: `distillation_student(consecutive_pairs=)`;
- stage 1's optimizer holds every student weight but `token_embedding` (`training/main_distill_rope.py:335, 341`):
  `distillation_student(train_token_embedding=)`;
- stage 2 adds CLIP's loss on the first sentences, `caption.split(".")[0]` (`training/train.py:289-304`,
  `training/data.py:100`, `CsvDatasetShortLongCaps`): `finetuning_stage(first_sentences=)`;
- stage 2's frequencies: `precompute_freqs_cis_dynamic_ntk_scaling(new_end=600, end=248, scaling_factor=8)`
  (`training/main_context_finetune_rope.py:306-309`; `--extended-context-length` defaults to 3 x
  `DEFAULT_CONTEXT_LENGTH` = 3 x 200, `training/params.py:470-474`, `tokenizer.py:23`, and `finetune_tulip.sh`
  sets none), captions tokenised at those 600 tokens (`training/main_context_finetune_rope.py:435`):
  `finetuning_model(max_length=, ntk_base_length=)`;
- AdamW's epsilon 1e-6 (`training/params.py:10`, a ViT's default), no gradient clipping (`--grad-clip-norm`
  defaults to none, `training/params.py:373`, and neither script sets it): `TULIP_ADAM_EPSILON`,
  `TULIP_MAX_GRAD_NORM`, which the OneLIP script applies to both stages;
- stage 2 starts from the base CLIP's text projection, not the distilled one: the release replaces CLIP's token
  embedding, transformer and final LayerNorm by the student's and keeps CLIP's `text_projection`
  (`training/main_context_finetune_rope.py:311-318`);
- stage 1 trains the text tower and the text projection (the student's parameters); the image tower, image
  projection and logit scale are frozen, so the optimizer never sees them.

Two things in the release cannot run as scripted, and here follow what the code evidently means: the stage-1 student
built at 248 positions receives 77-token texts while its causal mask stays 248 x 248 (here the causal mask has the
text's length), and the csv loader (`CsvDataset`) yields (image, text) pairs while both training loops unpack three
items (here stage 1 reads the caption cut at 77 tokens, stage 2 the caption and its first sentence, as
`CsvDatasetShortLongCaps` gives them).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import CLIPModel
from transformers.activations import ACT2FN

from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.models.onelip.convert_tulip import interleaved_to_half_split
from hf_longclip.models.onelip.modeling_onelip import OneLIPModel, inverse_frequencies
from hf_longclip.models.onelip.processing_onelip import OneLIPProcessor
from hf_longclip.objectives.clip import ClipLoss, TULIPLoss
from hf_longclip.recipes.longclip import FirstSentenceCollator, FirstSentenceTask
from hf_longclip.training.task import ContrastiveTask, Task

DISTILLATION_LOSSES = ("cosine", "mse", "l2")
TULIP_TEACHER_LENGTH = 77  # scripts/distill_tulip.sh: --context-length 77, the tokenizer of stage 1
TULIP_STUDENT_LENGTH = 248  # scripts/distill_tulip.sh: --student-context-length 248
TULIP_EXTENDED_LENGTH = 600  # training/params.py:470-474: --extended-context-length, 3 x DEFAULT_CONTEXT_LENGTH (200)
TULIP_TEXT_ACTIVATION = "gelu"  # transformer_rope.py:986: TextTransformerRoPE's act_layer, nn.GELU
TULIP_ADAM_EPSILON = 1e-6  # training/params.py:10
TULIP_MAX_GRAD_NORM = 0.0  # training/params.py:373: --grad-clip-norm None (no clipping)


def distillation_loss(teacher_embeds: torch.Tensor, student_embeds: torch.Tensor, loss_type: str = "cosine"):
    """TULIP's stage-1 loss between the teacher's and the student's (B, D) projected text embeddings (not
    normalised): `cosine` 1 - mean cosine, `mse` the mean squared error over every entry, `l2` the mean over texts
    of the Euclidean distance."""
    if loss_type not in DISTILLATION_LOSSES:
        raise ValueError(f"loss_type must be one of {DISTILLATION_LOSSES}, got {loss_type!r}")
    if teacher_embeds.shape != student_embeds.shape:
        raise ValueError(f"teacher and student embeddings differ in shape: {tuple(teacher_embeds.shape)} vs "
                         f"{tuple(student_embeds.shape)}")
    teacher, student = teacher_embeds.float(), student_embeds.float()
    if loss_type == "mse":
        return F.mse_loss(student, teacher)
    if loss_type == "l2":
        return (teacher - student).norm(dim=-1).mean()
    return 1 - F.cosine_similarity(teacher, student, dim=-1).mean()


def set_rope_scaling(model: OneLIPModel, ntk_scaling: bool, max_length: int | None = None,
                     base_length: int | None = None) -> OneLIPModel:
    """Switch the text encoder's rotary frequencies between plain RoPE and NTK scaling, and optionally its longest
    text T_g (`max_length`) and the length T_f the NTK factor scales from (`base_length`), in its configuration and in
    its frequency buffer (which every checkpoint records)."""
    for config in (model.config.text_config, model.text_model.config):
        config.rope_ntk_scaling = ntk_scaling
        if max_length is not None:
            config.max_position_embeddings = max_length
        if base_length is not None:
            config.base_length = base_length
    rotary = model.text_model.rotary
    with torch.no_grad():
        rotary.inv_freq.copy_(inverse_frequencies(model.config.text_config).to(rotary.inv_freq))
    return model


def set_text_activation(model: OneLIPModel, activation: str) -> OneLIPModel:
    """Give the text encoder's MLPs the activation `activation` (a transformers `ACT2FN` name), in its configuration
    and in every layer."""
    for config in (model.config.text_config, model.text_model.config):
        config.hidden_act = activation
    for layer in model.text_model.encoder.layers:
        layer.mlp.activation_fn = ACT2FN[activation]
    return model


def rotate_consecutive_pairs(model: OneLIPModel) -> OneLIPModel:
    """Permute the query and key rows (weights and biases) of every text layer so that this model's half-split RoPE
    rotates the coordinate pairs (2i, 2i + 1) of the original rows, as TULIP's `apply_rotary_emb` does on CLIP's."""
    heads = model.config.text_config.num_attention_heads
    with torch.no_grad():
        for layer in model.text_model.encoder.layers:
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                for param in (projection.weight, projection.bias):
                    if param is not None:
                        param.copy_(interleaved_to_half_split(param, heads))
    return model


def distillation_student(clip: CLIPModel, max_length: int = TULIP_STUDENT_LENGTH,
                         activation: str = TULIP_TEXT_ACTIVATION, consecutive_pairs: bool = True,
                         train_token_embedding: bool = False) -> OneLIPModel:
    """Stage 1's model: an `OneLIPModel` from `clip` with plain RoPE, the student TULIP builds from it (the text MLPs'
    `activation`, RoPE on the `consecutive_pairs` of CLIP's query and key rows), its image side (tower, projection,
    logit scale) frozen and, unless `train_token_embedding`, its token embedding too (outside TULIP's optimizer)."""
    model = set_rope_scaling(OneLIPModel.from_clip(clip, max_length=max_length), ntk_scaling=False)
    set_text_activation(model, activation)
    if consecutive_pairs:
        rotate_consecutive_pairs(model)
    for module in (model.vision_model, model.visual_projection):
        module.requires_grad_(False)
    model.logit_scale.requires_grad_(False)
    model.text_model.get_input_embeddings().requires_grad_(train_token_embedding)
    return model


def finetuning_model(distilled: OneLIPModel, clip: CLIPModel, max_length: int = TULIP_EXTENDED_LENGTH,
                     ntk_base_length: int | None = None) -> OneLIPModel:
    """Stage 2's model: the distilled one, every weight trainable, with `clip`'s text projection back (as the release
    builds its stage-2 model) and NTK-scaled frequencies from `ntk_base_length` (default: the distilled model's own
    length, TULIP's `end`) to `max_length` (TULIP's `new_end`)."""
    base_length = ntk_base_length or distilled.config.text_config.max_position_embeddings
    model = set_rope_scaling(distilled, ntk_scaling=True, max_length=max_length, base_length=base_length)
    model.requires_grad_(True)
    with torch.no_grad():
        model.text_projection.weight.copy_(clip.text_projection.weight)
    return model


def tulip_first_sentence(caption: str) -> str:
    """The short caption TULIP pairs with a long one (`training/data.py:100`): the text before its first full stop."""
    return caption.split(".")[0]


class TULIPDistillationTask(Task):
    """TULIP's stage 1 (`distillation_loss`) on batches of captions cut at the teacher's 77 tokens (the model's
    processor built with `max_length=77`). The teacher, a frozen copy of `teacher`'s text tower and projection
    (CLIP's `encode_text`), is training state held here, not part of the model; its embeddings and the student's
    projected end-of-text embeddings are what the loss compares. The student's forward runs the frozen image tower
    too (the batch carries images), with no gradient reaching it."""

    def __init__(self, model: torch.nn.Module, collate_fn: Callable, teacher: CLIPModel, loss_type: str = "cosine"):
        if loss_type not in DISTILLATION_LOSSES:
            raise ValueError(f"loss_type must be one of {DISTILLATION_LOSSES}, got {loss_type!r}")
        super().__init__(model, collate_fn)
        self.loss_type = loss_type
        self.teacher = copy.deepcopy(teacher).requires_grad_(False).eval()

    def options(self) -> dict:
        return {"stage": "tulip-distillation", "loss_type": self.loss_type}

    def encode(self, model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        self.teacher.to(batch["input_ids"].device)
        with torch.no_grad():
            teacher_embeds = self.teacher.get_text_features(
                input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).pooler_output
        outputs = model(**batch)
        student_embeds = outputs.text_model_output.pooler_output
        return {"teacher_embeds": teacher_embeds, "student_embeds": student_embeds}

    def loss(self, model: torch.nn.Module, encoded: dict, batch: dict) -> dict[str, torch.Tensor]:
        return {"distillation_loss": distillation_loss(encoded["teacher_embeds"], encoded["student_embeds"],
                                                       self.loss_type)}


class TULIPFineTuningTask(FirstSentenceTask):
    """TULIP's stage 2 (`training/train.py:289-304`): `TULIPLoss`, CLIP's loss of the images against their long
    captions plus against the captions' first sentences (batches of `FirstSentenceCollator`)."""

    def __init__(self, model: torch.nn.Module, collate_fn: Callable):
        super().__init__(model, collate_fn, TULIPLoss())

    def options(self) -> dict:
        return {"stage": "tulip-finetuning", "objective": "clip_loss(long captions) + clip_loss(first sentences)"}


def distillation_stage(clip: CLIPModel, tokenizer, image_processor, loss_type: str = "cosine",
                       max_length: int = TULIP_STUDENT_LENGTH, teacher_length: int = TULIP_TEACHER_LENGTH,
                       **student_options) -> tuple[TULIPDistillationTask, OneLIPProcessor]:
    """Stage 1 as a task, `clip` the teacher: `distillation_student(clip, max_length, **student_options)` on batches
    of captions cut at `teacher_length` tokens; and the processor of the student's own length (evaluation, saving)."""
    teacher_processor = OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=teacher_length)
    task = TULIPDistillationTask(distillation_student(clip, max_length, **student_options),
                                 ImageTextCollator(teacher_processor), teacher=clip, loss_type=loss_type)
    return task, OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer, max_length=max_length)


def finetuning_stage(distilled: OneLIPModel, clip: CLIPModel, tokenizer, image_processor, first_sentences: bool = True,
                     **model_options) -> tuple[ContrastiveTask, OneLIPProcessor]:
    """Stage 2 as a task: `finetuning_model(distilled, clip, **model_options)` on captions tokenised at its length,
    `TULIPFineTuningTask` (with `first_sentences`, TULIP's loss) or CLIP's loss on the long captions alone."""
    model = finetuning_model(distilled, clip, **model_options)
    processor = OneLIPProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                max_length=model.config.text_config.max_position_embeddings)
    if first_sentences:
        collate = FirstSentenceCollator(processor, short_caption=tulip_first_sentence)
        return TULIPFineTuningTask(model, collate), processor
    return ContrastiveTask(model, ImageTextCollator(processor), ClipLoss()), processor


__all__ = ["DISTILLATION_LOSSES", "TULIP_ADAM_EPSILON", "TULIP_EXTENDED_LENGTH", "TULIP_MAX_GRAD_NORM",
           "TULIP_STUDENT_LENGTH", "TULIP_TEACHER_LENGTH", "TULIP_TEXT_ACTIVATION", "TULIPDistillationTask",
           "TULIPFineTuningTask", "distillation_loss", "distillation_stage", "distillation_student", "finetuning_model",
           "finetuning_stage", "rotate_consecutive_pairs", "set_rope_scaling", "set_text_activation",
           "tulip_first_sentence"]
