"""One self-contained folder per model; `MODEL_FOLDERS` lists those `hf-longclip export-code` bundles."""

MODEL_FOLDERS = ("himo_clip", "ditm", "onelip", "cast", "fcast")
