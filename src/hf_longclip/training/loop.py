"""The one Accelerate training loop the example scripts share."""

import math
from dataclasses import dataclass, field

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import PreTrainedModel, get_cosine_schedule_with_warmup

logger = get_logger(__name__)

MAX_LOGIT_SCALE = math.log(100.0)  # CLIP's clamp of the learned temperature


@dataclass
class TrainingArguments:
    """Optimisation settings shared by every example script (HfArgumentParser turns them into flags)."""

    output_dir: str = field(default="outputs/himo", metadata={"help": "where checkpoints and results go"})
    seed: int = field(default=0, metadata={"help": "seed of model init, data order and dropout"})
    num_train_epochs: float = field(default=2.5, metadata={"help": "passes over the training split"})
    max_steps: int = field(default=-1, metadata={"help": "if > 0, stop after this many steps (overrides epochs)"})
    per_device_train_batch_size: int = field(default=64, metadata={"help": "batch per process (HiDe sees the global batch)"})
    per_device_eval_batch_size: int = field(default=128)
    learning_rate: float = field(default=5e-4)
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decay of matrices (not of biases, norms, scales)"})
    adam_beta2: float = field(default=0.98)
    warmup_steps: int = field(default=50)
    max_grad_norm: float = field(default=1.0)
    logging_steps: int = field(default=20)


def _parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """open_clip's split: decay matrices; leave 1-D parameters alone (biases, norm gains, class token, and the
    logit scale, a shape-(1,) parameter)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def train(
    model: PreTrainedModel,
    train_dataset: Dataset,
    collate_fn,
    args: TrainingArguments,
    accelerator: Accelerator,
    description: str = "train",
) -> tuple[PreTrainedModel, list[dict]]:
    """Train `model` with its own `forward(..., return_loss=True)` objective; returns the unwrapped model and the
    logged history (step, mean loss over processes, learning rate, logit scale)."""
    set_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    loader = DataLoader(
        train_dataset,
        batch_size=args.per_device_train_batch_size,
        shuffle=True,
        drop_last=True,  # the contrastive gather needs equal batches on every process
        collate_fn=collate_fn,
        generator=generator,
    )
    optimizer = torch.optim.AdamW(
        _parameter_groups(model, args.weight_decay), lr=args.learning_rate, betas=(0.9, args.adam_beta2)
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if len(loader) == 0:
        raise ValueError(
            f"{len(train_dataset)} training samples make no full batch of "
            f"{args.per_device_train_batch_size} x {accelerator.num_processes} processes"
        )
    total_steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * len(loader))
    scheduler = accelerator.prepare(
        get_cosine_schedule_with_warmup(optimizer, min(args.warmup_steps, total_steps // 2), total_steps)
    )
    unwrapped = accelerator.unwrap_model(model)
    history: list[dict] = []
    progress = tqdm(total=total_steps, desc=description, disable=not accelerator.is_local_main_process)
    model.train()
    step = 0
    while step < total_steps:
        for batch in loader:
            loss = model(**batch, return_loss=True).loss
            accelerator.backward(loss)
            if args.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                unwrapped.logit_scale.clamp_(0, MAX_LOGIT_SCALE)
            step += 1
            progress.update(1)
            if step % args.logging_steps == 0 or step == total_steps:
                mean_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
                record = {
                    "step": step,
                    "loss": mean_loss,
                    "lr": scheduler.get_last_lr()[0],
                    "logit_scale": unwrapped.logit_scale.exp().item(),
                }
                history.append(record)
                progress.set_postfix(loss=f"{mean_loss:.3f}")
                logger.info(f"{description} step {step}/{total_steps} loss {mean_loss:.4f}")
            if step >= total_steps:
                break
    progress.close()
    accelerator.wait_for_everyone()
    return unwrapped, history
