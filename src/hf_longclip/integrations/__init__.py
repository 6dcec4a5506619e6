"""Adapters between our models and the tools users already run them in: a diffusers pipeline's text encoder
(`diffusion`), ONNX export and ONNX Runtime (`onnx`), sentence-transformers (`sentence_transformers`), torchmetrics'
CLIP Score on an exported plain CLIP (`torchmetrics`). Each module imports its client only where it is used; the
model files know nothing of them."""
