"""Adapters between our models and the tools users already run them in: a diffusers pipeline's text encoder
(`diffusion`), ONNX export and ONNX Runtime (`onnx`), sentence-transformers (`sentence_transformers`), torchmetrics'
CLIP Score on an exported plain CLIP (`torchmetrics`), and the field's evaluation harnesses: LAION's CLIP_benchmark
(`clip_benchmark`) and MTEB (`mteb`). Each module imports its client only where it is used; the
model files know nothing of them."""

# the `benchmarks` extra: what `clip_benchmark` and `mteb` need (pyproject.toml)
BENCHMARK_PACKAGES = ("mteb", "clip-benchmark", "webdataset", "pycocoevalcap")
