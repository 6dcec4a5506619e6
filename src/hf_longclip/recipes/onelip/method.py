"""OneLIP as the registry knows it (`hf_longclip.recipes.registry`): one stage (TRIM distillation from a frozen
77-token teacher, Eq. 10), PO-HNM's queued hard negatives where asked."""

import torch
from transformers import CLIPTextConfig, CLIPTextModel

from hf_longclip.models.onelip.configuration_onelip import OneLIPConfig
from hf_longclip.models.onelip.modeling_onelip import OneLIPForPreTraining
from hf_longclip.recipes.onelip.card import CARD
from hf_longclip.recipes.onelip.task import OneLIPTask
from hf_longclip.recipes.registry import LONG_LENGTH, SHORT_LENGTH, Method


class QueuedNegativesStandIn:
    """PO-HNM's queues as the device holds them (`HardNegativeQueues`, without faiss or the on-disk queues): the
    bank's caption embeddings (captions x projection, float16) on the device, each batch's M queued negatives
    gathered from it by index, every slot filled; `refresh` (host work: faiss, the queue file) does nothing."""

    def __init__(self, bank: torch.Tensor, queue_size: int):
        self.bank, self.queue_size = bank.half(), queue_size

    def negatives(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.zeros(rows.shape[0], self.queue_size, dtype=torch.long, device=self.bank.device)
        filled = indices >= 0
        return self.bank[indices].masked_fill_(~filled[..., None], 0), filled

    def refresh(self, rows, image_embeds, text_embeds, negative_embeds, step) -> dict:
        return {}


def _onelip(size, options):
    model = OneLIPForPreTraining(OneLIPConfig(text_config=dict(size.text_config(LONG_LENGTH), base_length=SHORT_LENGTH),
                                              vision_config=size.vision_config(), projection_dim=size.projection_dim))
    teacher = CLIPTextModel(CLIPTextConfig(**size.text_config(SHORT_LENGTH)))
    queues = None
    if options.hard_negatives:
        bank = torch.zeros(options.bank_captions, size.projection_dim, dtype=torch.float16)
        queues = QueuedNegativesStandIn(bank, options.hard_negatives)
    # the GPU's decomposition (the CPU's exact one is `auto` on a CPU)
    task = OneLIPTask(model, None, teacher=teacher, hard_negatives=queues,
                      trim_decomposition="subspace" if options.target == "gpu" else "auto")
    return model, task


def _batch(size, rows, inputs, options) -> dict:
    batch = {**inputs.texts(rows, LONG_LENGTH), "pixel_values": inputs.images(rows)}
    if options.hard_negatives:
        batch["sample_index"] = torch.arange(rows, device=batch["pixel_values"].device)
    return batch


def _held_outside(task) -> dict:
    held = {"frozen teacher": [list(task.teacher.parameters()), list(task.teacher.buffers())]}
    if task.hard_negatives is not None:
        held["PO-HNM bank"] = [task.hard_negatives.bank]
    return held


def _plan_notes(options) -> list[str]:
    if not options.hard_negatives:
        return []
    return [f"PO-HNM: the bank's {options.bank_captions:,} caption embeddings on the GPU (float16), each sample's "
            f"{options.hard_negatives} queued negatives gathered from it; the queues themselves stay on disk"]


METHODS = (
    Method("onelip", "OneLIP (OneLIPTask): Eq. 10 with TRIM, a frozen 77-token text teacher of the same size, PO-HNM's "
                     "queued hard negatives, 248 tokens",
           _onelip, _batch, held_outside=_held_outside,
           plan_notes=_plan_notes, script="examples/train_onelip.py", card=CARD, options_used=("hard_negatives",)),
)
