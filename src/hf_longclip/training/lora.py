"""Parameter-efficient fine-tuning of any of the library's models with LoRA (peft).

    model = AutoModel.from_pretrained(base_dir, trust_remote_code=True)   # or from_clip(...), or from a config
    if lora_args.lora_r > 0:
        model = apply_lora(model, lora_args)             # a peft.PeftModel; base weights frozen
        trainable, total = count_parameters(model)
    model, history = train(task, ...)                    # the shared loop; task.model = the PeftModel
    save_model(accelerator, model, adapter_dir)          # a PeftModel saves its adapter only (adapter_config.json,
                                                         # adapter_model.safetensors), also via save_pretrained
    model = merge_lora(model)                            # the plain model again (DDP wrapper removed)
    save_model(accelerator, model, checkpoint_dir)       # normal checkpoint: AutoModel + trust_remote_code loads it

`PeftModel.forward` hands every keyword (`input_ids`, `pixel_values`, `attention_mask`, `return_loss`, ...) to
the wrapped model's `forward` unchanged, so the objective is the wrapped model's. Attributes the wrapper does not
have are looked up on the wrapped model: `peft_model.get_text_features(...)`, `peft_model.get_image_features(...)`
and `peft_model.logit_scale` (the very parameter of the base model) all work, also on
`accelerator.unwrap_model(prepared_model)`, which returns the PeftModel.

The logit scale stays frozen under LoRA. It is a bare `nn.Parameter`, not a module, so peft's `modules_to_save`
cannot hold it, and marking it trainable by hand would train it without saving it: `save_pretrained` of the
adapter writes LoRA weights and `modules_to_save` copies only, so a reloaded adapter would silently come back
with the base's temperature. CLIP LoRA recipes keep the pretrained temperature anyway (CLIP's is at its clamp,
100). The training loop's clamp leaves a frozen scale within [0, ln 100] bit-identical.

Reload an adapter onto its base (the same weights it was trained on):

    base = AutoModel.from_pretrained(base_dir, trust_remote_code=True)
    model = PeftModel.from_pretrained(base, adapter_dir)                  # is_trainable=True to train on
    # or, with hf_longclip installed and adapter_config.json's base_model_name_or_path pointing at our checkpoint:
    model = AutoPeftModel.from_pretrained(adapter_dir, import_allowlist=["hf_longclip"])

`adapter_config.json` records `base_model_name_or_path`: the base's own `name_or_path` (set by `from_pretrained`)
or the path passed to `apply_lora`. A model built from a config or with `from_clip` has none, so
save that base first and pass its directory, else the field is null and the base must be rebuilt by hand.
"""

import warnings
from dataclasses import dataclass, field

from accelerate.utils import extract_model_from_parallel
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from transformers import PreTrainedModel

ALL_LINEAR = "all-linear"  # peft's shorthand: every Linear layer (here attention, MLPs and both projections)


@dataclass
class LoraArguments:
    """LoRA settings (HfArgumentParser turns them into `--lora_*` flags)."""

    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 turns LoRA off (full fine-tuning)"})
    lora_alpha: float = field(default=16, metadata={"help": "LoRA scaling numerator: updates are scaled by alpha / r"})
    lora_dropout: float = field(default=0.0, metadata={"help": "dropout on the LoRA branch's input"})
    lora_target_modules: str = field(
        default="q_proj,k_proj,v_proj,out_proj",
        metadata={"help": "comma list of module names (or dotted name suffixes, e.g. text_model.encoder.layers.11."
                          "self_attn.q_proj) that get LoRA, in both towers unless prefixed; or 'all-linear'"},
    )
    lora_modules_to_save: str = field(
        default="",
        metadata={"help": "comma list of modules trained in full and saved with the adapter, e.g. "
                          "text_model.embeddings.position_embedding (Long-CLIP's stretched positions)"},
    )

    def __post_init__(self):
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0 (0 turns LoRA off), got {self.lora_r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")


def split_names(value: str) -> list[str]:
    """'q_proj, v_proj,' -> ['q_proj', 'v_proj']."""
    return [name.strip() for name in value.split(",") if name.strip()]


def linear_module_names(model: nn.Module) -> list[str]:
    """Sorted distinct last components of the model's Linear module names (what `lora_target_modules` takes)."""
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, nn.Linear)})


def _matches(module_name: str, target: str) -> bool:
    """peft's rule for a list of target names: the full name, or a suffix starting after a dot."""
    return module_name == target or module_name.endswith("." + target)


def resolve_module_names(model: nn.Module, value: str, flag: str = "lora_target_modules") -> list[str]:
    """Split a comma list and check every name matches a module of `model`; ValueError naming those that do not."""
    names = split_names(value)
    module_names = [name for name, _ in model.named_modules() if name]
    unknown = [target for target in names if not any(_matches(name, target) for name in module_names)]
    if unknown:
        raise ValueError(
            f"{flag}: no module of {type(model).__name__} is named {unknown}. "
            f"Linear modules: {linear_module_names(model)} (a dotted suffix such as "
            "'text_model.encoder.layers.0.self_attn.q_proj' restricts a name to one tower or layer)"
        )
    return names


def apply_lora(model: PreTrainedModel, args: LoraArguments, base_model_name_or_path: str | None = None) -> PeftModel:
    """Wrap `model` in LoRA adapters (in place: layers are injected into `model`, whose weights are all frozen).

    Only the LoRA matrices (and the `lora_modules_to_save` copies) train; the logit scale stays frozen (see the
    module docstring). LoRA's B matrices start at zero, so the wrapped model first computes exactly what `model`
    did. `base_model_name_or_path` (default: the model's own `name_or_path`, if any) goes into
    adapter_config.json to say which checkpoint the adapter belongs on.
    """
    if isinstance(model, PeftModel) or any(isinstance(m, BaseTunerLayer) for m in model.modules()):
        raise ValueError("the model already has adapters: merge_lora (or unload) it first")
    if args.lora_r <= 0:
        raise ValueError(f"lora_r must be > 0 to apply LoRA, got {args.lora_r}")
    if args.lora_target_modules.strip() == ALL_LINEAR:
        target_modules = ALL_LINEAR
    else:
        target_modules = resolve_module_names(model, args.lora_target_modules, "lora_target_modules")
        if not target_modules:
            raise ValueError("lora_target_modules is empty")
    modules_to_save = resolve_module_names(model, args.lora_modules_to_save, "lora_modules_to_save") or None
    config = LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=target_modules,
        modules_to_save=modules_to_save,
        bias="none",
    )
    with warnings.catch_warnings():  # peft 0.21 probes transformers' deprecated `is_gradient_checkpointing`
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = get_peft_model(model, config)
    if base_model_name_or_path is not None:
        peft_model.peft_config[peft_model.active_adapter].base_model_name_or_path = str(base_model_name_or_path)
    return peft_model


def merge_lora(peft_model: PeftModel) -> PreTrainedModel:
    """Fold the adapters into the base weights and return the base model without LoRA
    layers, whose `save_pretrained` writes an ordinary checkpoint. `modules_to_save` copies replace the originals.

    Takes the PeftModel or what `accelerator.prepare` made of it (DDP is unwrapped; a ZeRO-3 partitioned model
    must be gathered first, e.g. reload the saved adapter onto the base). The returned model is the one
    `apply_lora` was given, modified in place; its parameters stay frozen (`requires_grad=False`) as peft leaves
    them. The PeftModel (and its prepared wrapper) must not be used afterwards.
    """
    peft_model = extract_model_from_parallel(peft_model)  # DDP / torch.compile wrappers from accelerator.prepare
    if not isinstance(peft_model, PeftModel):
        raise TypeError(f"merge_lora expects a peft.PeftModel (from apply_lora), got {type(peft_model).__name__}")
    merged = peft_model.merge_and_unload(safe_merge=True)  # safe_merge: raise rather than write NaN weights
    leftovers = [name for name, module in merged.named_modules() if isinstance(module, BaseTunerLayer)]
    if leftovers or hasattr(merged, "peft_config"):
        raise RuntimeError(f"adapter layers left after merging: {leftovers}")
    return merged


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts, e.g. for logging `trainable / total` after `apply_lora`."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


__all__ = [
    "ALL_LINEAR",
    "LoraArguments",
    "apply_lora",
    "count_parameters",
    "linear_module_names",
    "merge_lora",
    "resolve_module_names",
    "split_names",
]
