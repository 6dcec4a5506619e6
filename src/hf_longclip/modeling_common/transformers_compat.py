"""Every difference between the transformers releases a checkpoint's code runs on (4.57, the last 4.x, and every 5.x
minor), in one place. Each branch names the releases it is for; everything here is public transformers API."""

import json
from pathlib import Path

import torch
import transformers
from transformers import CLIPTextModel, CLIPVisionModel, PreTrainedModel

RELEASE = tuple(int(part) for part in transformers.__version__.split(".")[:2])

try:  # 5.0 and later: initialisation functions that leave the weights a checkpoint loaded as they are
    from transformers import initialization as init
    from transformers.initialization import no_init_weights
except ImportError:  # 4.57: torch's own (from_pretrained initialises first, then loads the checkpoint's weights)
    from types import SimpleNamespace

    from transformers.modeling_utils import no_init_weights

    def _copy_(tensor: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return tensor.copy_(other)

    init = SimpleNamespace(
        **{name: getattr(torch.nn.init, name) for name in (
            "uniform_", "normal_", "constant_", "ones_", "zeros_", "xavier_uniform_", "kaiming_uniform_",
            "kaiming_normal_", "trunc_normal_")},
        copy_=_copy_,
    )


try:  # 5.20 and later: a composite configuration names its parts in `sub_configs_defaults`, as specs (5.21 and later
    # also take the classes themselves; 5.20 does not)
    from transformers.configuration_utils import SubConfigSpec

    def sub_config_specs(classes: dict) -> dict:
        """`sub_configs_defaults` for the parts `classes` (name -> configuration class)."""
        return {key: SubConfigSpec(config_class=config_class) for key, config_class in classes.items()}
except ImportError:  # 4.57-5.19: they read `sub_configs` (the classes) instead
    def sub_config_specs(classes: dict) -> dict:
        """`sub_configs_defaults` for the parts `classes`: unread before 5.20."""
        return {}


try:  # 5.6 and later: transformers' CLIP loss (`CLIPModel.forward(return_loss=True)`)
    from transformers.models.clip.modeling_clip import image_text_contrastive_loss as clip_loss
except ImportError:  # 4.57-5.5: the same function under its earlier name
    from transformers.models.clip.modeling_clip import clip_loss


if RELEASE < (5, 0):
    class ProcessorParts:
        """4.57: a processor names its parts and the Auto classes that load them."""

        attributes = ["image_processor", "tokenizer"]
        image_processor_class = "AutoImageProcessor"
        tokenizer_class = "AutoTokenizer"
else:
    class ProcessorParts:
        """5.0 and later find a processor's parts in its `__init__` (naming them is deprecated there)."""


def save_processor_parts(processor, directory) -> None:
    """After `processor.save_pretrained(directory)`: the layout every release reads. 5.x nests the image processor's
    settings in `processor_config.json`, where 4.57 would take them for the image processor itself: they go to the
    image processor's own `preprocessor_config.json` (which 5.x reads too). A tokenizer of `tokenizers`' own
    (`TokenizersBackend`, 5.x's name) is named `PreTrainedTokenizerFast`, the name 4.57 and 5.x both resolve."""
    directory = Path(directory)
    config_file = directory / "processor_config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        if isinstance(config.pop("image_processor", None), dict):
            config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if getattr(processor, "image_processor", None) is not None:
        processor.image_processor.save_pretrained(directory)
    tokenizer_file = directory / "tokenizer_config.json"
    if tokenizer_file.is_file():
        config = json.loads(tokenizer_file.read_text(encoding="utf-8"))
        if config.get("tokenizer_class") == "TokenizersBackend":
            config["tokenizer_class"] = "PreTrainedTokenizerFast"
            tokenizer_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def clip_tower(config, vision: bool = False) -> torch.nn.Module:
    """transformers' CLIP text (or vision) transformer built from `config`, with CLIP's parameter names on every
    release: `embeddings.*`, `encoder.*`, `final_layer_norm.*` (vision: `pre_layrnorm.*`, `post_layernorm.*`).
    From 5.6 `CLIPTextModel` / `CLIPVisionModel` hold these themselves; up to 5.5 they hold them under `text_model.` /
    `vision_model.` (the transformer that `CLIPModel` itself keeps, as it does on every release). Its forward takes
    `input_ids` (`pixel_values`), `attention_mask`, `position_ids` and the output flags, and returns
    `last_hidden_state` and `pooler_output`. Up to 5.5 the transformer is not a model itself: its
    `weights_initializer` is CLIP's `_init_weights` (`InitializesEveryModuleMixin` applies it inside the tower)."""
    model = (CLIPVisionModel if vision else CLIPTextModel)(config)
    tower = getattr(model, "vision_model" if vision else "text_model", model)
    if tower is not model:  # 4.57-5.5: the transformer keeps CLIP's initialisation rules with it
        tower.weights_initializer = model._init_weights
    return tower


def nested_text_state_dict(state: dict) -> dict:
    """A CLIP text model's weights under the names of 4.57-5.5's `CLIPTextModel` (`text_model.embeddings.*`, ...,
    `text_projection.weight` as they are), which every release loads (5.6 and later map them onto their flat
    `CLIPTextModel`) and which image-generation tools read (ComfyUI, Forge, diffusers' single files after their
    prefix); 5.6 and later save the flat names (`embeddings.*`)."""
    return {key if key.startswith(("text_model.", "text_projection.")) else f"text_model.{key}": value
            for key, value in state.items()}


def tower_outputs(tower: torch.nn.Module, **inputs):
    """`tower(**inputs)` as an output object: a tower that is a model (transformers' CLIP towers from 5.6, the
    library's own) is asked for one (`return_dict=True`); the transformer inside 4.57-5.5's `CLIPTextModel` /
    `CLIPVisionModel` returns one and takes no `return_dict` (4.57: no other keyword either, so only inputs and
    output flags are passed)."""
    if isinstance(tower, PreTrainedModel):
        inputs["return_dict"] = True
    return tower(**inputs)


__all__ = ["RELEASE", "ProcessorParts", "clip_loss", "clip_tower", "init", "nested_text_state_dict", "no_init_weights",
           "save_processor_parts", "sub_config_specs", "tower_outputs"]
