"""Shared test helpers, imported as `helpers.<module>` (pytest puts tests/ on the path; see pyproject.toml): the tiny
CLIP / HiMo-CLIP models, the character tokenizer, processors, captions and images (`builders`), launching scripts and
multi-process runs (`launch`), loading a checkpoint in a fresh process (`fresh_process`), OpenAI's BPE file and
converted checkpoints loaded in a fresh process for the conversion tests (`conversion`), the loopback fake Hub and its
clients (`fake_hub`, `hub`), transformers' common model tests (`transformers_common`, `modeling_common`), files in
the real benchmarks' formats (`benchmark_files`), a tiny diffusers pipeline (`diffusion`), per-model tiny builders
(`cast`, `ditm`, `fcast`, `onelip`, `dual_encoders`) and float tolerances derived from the computation
(`numerics`). tests/conftest.py holds fixtures and hooks only: no test imports it."""
