"""AdamW's parameter groups: open_clip's weight-decay split, refined by per-module learning-rate multipliers and
layer-wise learning-rate decay (`LoopArguments.lr_multipliers`, `LoopArguments.layer_decay`); and tower locking
(`LoopArguments.lock_image`, `lock_text`), which takes a tower out of them."""

from __future__ import annotations

import logging
import re

import torch

from ..models.conversion import WRAPPER_PREFIXES
from .arguments import check_layer_decay, parse_lr_multipliers

logger = logging.getLogger(__name__)

_BLOCK = re.compile(r"^(?P<tower>.+?)\.encoder\.layers\.(?P<block>\d+)\.")
_EMBEDDING_PARTS = ("embeddings", "pre_layrnorm", "pre_layernorm")


def _bare_name(name: str) -> str:
    stripped = True
    while stripped:
        stripped = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix):], True
    return name


def _has_prefix(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layer_decay_factors(names: list[str], decay: float) -> dict[str, float]:
    """BEiT-style layer-wise decay per tower; see `LoopArguments.layer_decay`. Names outside towers are absent."""
    depth = {}  # tower prefix -> number of blocks
    for name in names:
        match = _BLOCK.match(name)
        if match:
            depth[match["tower"]] = max(depth.get(match["tower"], 0), int(match["block"]) + 1)
    if not depth:
        raise ValueError("layer_decay != 1 but the model has no transformer tower ('<tower>.encoder.layers.<i>.')")
    factors = {}
    for name in names:
        match = _BLOCK.match(name)
        if match:
            tower, layer = match["tower"], int(match["block"]) + 1
        else:
            tower = next((t for t in sorted(depth, key=len, reverse=True) if name.startswith(t + ".")), None)
            if tower is None:
                continue
            first = name[len(tower) + 1:].split(".")[0]
            layer = 0 if first in _EMBEDDING_PARTS else depth[tower] + 1
        factors[name] = decay ** (depth[tower] + 1 - layer)
    return factors


# A tower is what a CLIP checkpoint gives: its encoder and projection (a classifier's backbone: CAST, ViT). Modules a
# model adds on top (DITM's GPO, F-CAST's second text stage and grounding pool, a classifier head) are not locked.
TOWER_PREFIXES = {"image": ("vision_model", "visual_projection", "cast", "vit"),
                  "text": ("text_model", "text_projection")}
_TOWER_BLOCK = re.compile(r"^(?:vision_model|text_model|cast|vit)\.(?:encoder\.layers?|stages)\.(?P<block>\d+)\.")


def lock_tower(model: torch.nn.Module, tower: str, unlocked_layers: int = 0) -> int:
    """Freeze tower `tower` ("image" or "text", `TOWER_PREFIXES`) of `model` (requires_grad=False, so it gets no
    gradient and, left out of `parameter_groups`, no optimizer state), as open_clip's `--lock-image`/`--lock-text`.
    With `unlocked_layers` N > 0 its last N transformer blocks and its parameters outside the embeddings and blocks
    (final norm, projection) stay trainable. Returns the number of parameters frozen; a ValueError when the model
    has no such tower or fewer than N blocks."""
    prefixes = TOWER_PREFIXES[tower]
    named = [(_bare_name(name), param) for name, param in model.named_parameters()]
    in_tower = [(name, param) for name, param in named if any(_has_prefix(name, p) for p in prefixes)]
    if not in_tower:
        raise ValueError(f"--lock_{tower}: {type(model).__name__} has no {tower} tower (no parameter under "
                         f"{', '.join(prefixes)})")
    blocks = {name: int(match["block"]) for name, _ in in_tower if (match := _TOWER_BLOCK.match(name))}
    depth = max(blocks.values(), default=-1) + 1
    if unlocked_layers > depth:
        raise ValueError(f"--lock_{tower}_unlocked_layers {unlocked_layers}: the {tower} tower has {depth} blocks")
    frozen = 0
    for name, param in in_tower:
        if unlocked_layers and name in blocks:
            locked = blocks[name] < depth - unlocked_layers
        elif unlocked_layers:
            locked = name.split(".")[1] in _EMBEDDING_PARTS  # before the blocks; after them: trainable
        else:
            locked = True
        if locked and param.requires_grad:
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


def lock_towers(model: torch.nn.Module, args) -> None:
    """`lock_tower` for each tower `args` (`LoopArguments`) locks, logging how many parameters each leaves out."""
    for tower in TOWER_PREFIXES:
        if getattr(args, f"lock_{tower}"):
            unlocked = getattr(args, f"lock_{tower}_unlocked_layers")
            frozen = lock_tower(model, tower, unlocked)
            logger.info(f"{tower} tower locked: {frozen:,} parameters frozen"
                        + (f" (its last {unlocked} blocks, final norm and projection train)" if unlocked else ""))


def parameter_groups(model: torch.nn.Module, weight_decay: float, learning_rate: float | None = None,
                     lr_multipliers: str = "", layer_decay: float = 1.0) -> list[dict]:
    """open_clip's split: decay matrices; leave 1-D parameters alone (biases, norm gains, class token, and the
    logit scale, a shape-(1,) parameter).

    With `lr_multipliers` or `layer_decay` (see `LoopArguments`), each trainable parameter gets a factor (its
    prefix's multiplier times its layer's decay, matched on names without DDP/peft wrapper prefixes) and the
    groups split further by factor, each with lr = learning_rate * factor: largest factor first, decay before
    no-decay within a factor, empty groups dropped. The cosine schedule scales every group's lr by the same
    lambda, so the ratios hold throughout. Without them: exactly two groups, decay then no-decay, no 'lr' key.
    """
    multipliers = parse_lr_multipliers(lr_multipliers)
    check_layer_decay(layer_decay)
    if not multipliers and layer_decay == 1.0:
        decay, no_decay = [], []
        for param in model.parameters():
            if not param.requires_grad:
                continue
            (no_decay if param.ndim < 2 else decay).append(param)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if learning_rate is None:
        raise ValueError("learning_rate is needed for lr_multipliers or layer_decay")

    named = [(_bare_name(name), param) for name, param in model.named_parameters()]
    names = [name for name, _ in named]
    unmatched = [prefix for prefix in multipliers if not any(_has_prefix(name, prefix) for name in names)]
    if unmatched:
        raise ValueError(f"lr_multipliers: prefix(es) {unmatched} match no parameter of the model (names look "
                         f"like {names[:3]})")
    layer_factors = _layer_decay_factors(names, layer_decay) if layer_decay != 1.0 else {}
    by_prefix_length = sorted(multipliers, key=len, reverse=True)

    groups: dict[tuple[float, bool], list] = {}
    for name, param in named:
        if not param.requires_grad:
            continue
        prefix = next((p for p in by_prefix_length if _has_prefix(name, p)), None)
        factor = (multipliers[prefix] if prefix is not None else 1.0) * layer_factors.get(name, 1.0)
        groups.setdefault((factor, param.ndim >= 2), []).append(param)
    return [
        {"params": params, "weight_decay": weight_decay if decays else 0.0, "lr": learning_rate * factor}
        for (factor, decays), params in sorted(groups.items(), key=lambda item: (-item[0][0], not item[0][1]))
    ]
