"""The model layer: one folder per model holding its architecture alone (configuration, modeling, processing: the
remote code; and the converter of its family's released checkpoints), and the converters' shared readers
(`conversion`, `convert_clip`). It imports torch, transformers, safetensors, huggingface_hub, the standard library
and `hf_longclip.modeling_common`, never the harness (`hf_longclip.recipes`, training, evaluation, objectives, data).
`MODEL_FOLDERS`, every subpackage here, is the one list of models: `hf_longclip` registers each folder's
`AUTO_CLASSES` with transformers' Auto classes, and `hf-longclip export-code` writes each folder's remote-code
bundle. A new model is a new folder (docs/contributing.md)."""

import pkgutil

MODEL_FOLDERS = tuple(sorted(module.name for module in pkgutil.iter_modules(__path__) if module.ispkg))
