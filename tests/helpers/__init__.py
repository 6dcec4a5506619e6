"""Shared test helpers, imported as `helpers.<module>` (pytest puts tests/ on the path; see pyproject.toml): launching
scripts and multi-process runs (`launch`), loading a checkpoint in a fresh process (`fresh_process`), OpenAI's BPE
file and converted checkpoints loaded in a fresh process for the conversion tests (`conversion`), the loopback
fake Hub and its clients (`fake_hub`, `hub`), transformers' common model tests (`transformers_common`,
`modeling_common`), files in the real benchmarks' formats (`benchmark_files`), a tiny diffusers pipeline
(`diffusion`) and F-CAST's tiny builders (`fcast`). Fixtures and the tiny HiMo-CLIP / CLIP builders live in
tests/conftest.py."""
