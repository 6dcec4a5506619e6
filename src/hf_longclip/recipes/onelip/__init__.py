"""What trains OneLIP: its one-stage task (TRIM distillation from a frozen teacher, PO-HNM's hard-negative queues
over an on-disk negative bank), TULIP's two-stage baseline, the variants train_onelip.py compares (`method`), plots
and the Hub card information."""

from hf_longclip.recipes.onelip.card import CARD
from hf_longclip.recipes.onelip.hard_negatives import HardNegativeQueues
from hf_longclip.recipes.onelip.method import (
    BASE_LENGTH,
    CHOICES,
    METHODS,
    check_onelip_start,
    evaluate_start,
    is_onelip_checkpoint,
    variant_groups,
)
from hf_longclip.recipes.onelip.negative_bank import NegativeBank, default_bank_directory, model_digest
from hf_longclip.recipes.onelip.plots import loss_notes, plot_figure_3, plot_recall_by_length
from hf_longclip.recipes.onelip.task import OneLIPTask
from hf_longclip.recipes.onelip.tulip import (
    DISTILLATION_LOSSES,
    TULIP_ADAM_EPSILON,
    TULIP_MAX_GRAD_NORM,
    TULIPDistillationTask,
    TULIPFineTuningTask,
    distillation_stage,
    distillation_student,
    finetuning_model,
    finetuning_stage,
    set_rope_scaling,
)

__all__ = ["BASE_LENGTH", "CARD", "CHOICES", "METHODS", "DISTILLATION_LOSSES", "TULIP_ADAM_EPSILON",
           "TULIP_MAX_GRAD_NORM", "HardNegativeQueues", "NegativeBank", "OneLIPTask", "TULIPDistillationTask",
           "TULIPFineTuningTask", "check_onelip_start", "default_bank_directory", "distillation_stage",
           "distillation_student", "evaluate_start", "finetuning_model", "finetuning_stage", "is_onelip_checkpoint",
           "loss_notes", "model_digest", "plot_figure_3", "plot_recall_by_length", "set_rope_scaling",
           "variant_groups"]
