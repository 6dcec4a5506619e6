"""What trains OneLIP: its one-stage task (TRIM distillation from a frozen teacher, PO-HNM's hard-negative queues
over an on-disk negative bank), TULIP's two-stage baseline, plots and the Hub card information."""

from hf_longclip.recipes.onelip.card import CARD
from hf_longclip.recipes.onelip.hard_negatives import HardNegativeQueues
from hf_longclip.recipes.onelip.method import METHODS
from hf_longclip.recipes.onelip.negative_bank import NegativeBank, default_bank_directory, model_digest
from hf_longclip.recipes.onelip.plots import loss_notes, plot_recall_by_length
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

__all__ = ["CARD", "METHODS", "DISTILLATION_LOSSES", "TULIP_ADAM_EPSILON", "TULIP_MAX_GRAD_NORM",
           "HardNegativeQueues", "NegativeBank", "OneLIPTask", "TULIPDistillationTask", "TULIPFineTuningTask",
           "default_bank_directory", "distillation_stage", "distillation_student", "finetuning_model",
           "finetuning_stage", "loss_notes", "model_digest", "plot_recall_by_length", "set_rope_scaling"]
