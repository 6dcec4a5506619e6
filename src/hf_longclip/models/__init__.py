"""The model registry: one folder per model, everything specific to it inside (configuration, modeling, processing:
the remote code; beside them its task, card, evaluation, figures). `MODEL_FOLDERS` is the one list of models:
`hf_longclip` registers each folder's `AUTO_CLASSES` with transformers' Auto classes, and `hf-longclip export-code`
writes each folder's remote-code bundle."""

MODEL_FOLDERS = ("himo_clip", "ditm", "onelip", "cast", "fcast")
