"""docs/evaluation.md's commands for CLIP_benchmark, MTEB and the Hub's evaluation results run as written (each
```bash block of that section, in a folder holding the `checkpoints/himo-clip` and `data/Urban1k` they name; the
push to the loopback fake Hub), and the three harnesses agree on one checkpoint and benchmark: CLIP_benchmark's
recall@1, MTEB's recall@1 and the `.eval_results/` file pushed from `hf-longclip eval`'s report."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.fake_hub import FakeHub
from helpers.harnesses import clip_benchmark_env, save_dual_encoder, write_urban1k
from helpers.hub import TOKEN, hub_env

DOCS = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"
SECTION = "## CLIP_benchmark, MTEB and the Hub's evaluation results"
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def section_blocks() -> list[str]:
    text = DOCS.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return BASH_BLOCK.findall(text[start:end])


def run(block: str, cwd: Path, env: dict) -> str:
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{block}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_documented_commands_run_and_the_three_harnesses_agree(tmp_path):
    save_dual_encoder("himo_clip", tmp_path / "checkpoints/himo-clip")
    write_urban1k(tmp_path / "data/Urban1k", 12)  # CLIP_benchmark needs at least K=10 candidates
    clip_benchmark_block, mteb_block, push_block = section_blocks()
    env = clip_benchmark_env()
    run(clip_benchmark_block, tmp_path, env)
    theirs = json.loads((tmp_path / "clip_benchmark_urban1k.json").read_text())["metrics"]
    assert "text_retrieval_recall@1" in (tmp_path / "benchmark.csv").read_text()
    printed = run(mteb_block, tmp_path, env)
    mteb_i2t = json.loads(next((tmp_path / "mteb-results").rglob("Urban1kI2TRetrieval.json")).read_text())
    assert "Urban1kI2TRetrieval nDCG@10" in printed
    with FakeHub(token=TOKEN) as hub:
        push_env = {**hub_env(hub, tmp_path / "home"), "PYTHONPATH": env["PYTHONPATH"]}
        run("python -c \"from huggingface_hub import HfApi; HfApi().create_repo('org/himo-clip')\"", tmp_path,
            push_env)
        run(push_block, tmp_path, push_env)
        pushed = yaml.safe_load(hub.file("org/himo-clip", ".eval_results/urban1k_retrieval_r1_i2t.yaml"))
    report = json.loads((tmp_path / "outputs/eval/urban1k/report.json").read_text())["metrics"]["retrieval"]
    r1 = report["r1_i2t"]
    assert report["ties_i2t"] == 0
    assert pushed[0]["value"] == r1 and pushed[0]["dataset"]["id"] == "BeichenZhang/Urban1k"
    assert theirs["text_retrieval_recall@1"] == pytest.approx(r1 / 100, abs=1e-6)
    assert mteb_i2t["scores"]["test"][0]["recall_at_1"] == pytest.approx(r1 / 100, abs=5e-6)
