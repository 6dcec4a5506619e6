"""A Hub id, not only a folder: a checkpoint pushed to the loopback fake Hub is scored by CLIP_benchmark
(`--pretrained ORG/NAME`) and by MTEB (`model_meta("ORG/NAME")`), each in a child process whose environment names
the fake Hub (tests/helpers/hub.py), as `hf-longclip eval` scores the folder it came from."""

import json
import subprocess
import sys

import pytest

from helpers.fake_hub import FakeHub
from helpers.harnesses import clip_benchmark_env, save_dual_encoder, write_urban1k
from helpers.hub import TOKEN, hub_env
from hf_longclip.evaluation import run_evaluation

MTEB_BY_HUB_ID = """
import json, sys
import mteb
from mteb.cache import ResultCache
from hf_longclip.integrations.mteb import long_caption_tasks, model_meta
from hf_longclip.training.hub import push_to_hub
push_to_hub(sys.argv[1], "org/himo", card=None)
results = mteb.evaluate(model_meta("org/himo"), long_caption_tasks("urban1k", sys.argv[2]),
                        cache=ResultCache("mteb-results"), show_progress_bar=False)
print(json.dumps({result.task_name: result.scores["test"][0]["recall_at_1"] for result in results.task_results}))
"""


def run(command: list[str], env: dict, cwd) -> str:
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_clip_benchmark_and_mteb_score_a_hub_id(tmp_path):
    checkpoint = save_dual_encoder("himo_clip", tmp_path / "himo_clip")
    data = write_urban1k(tmp_path / "Urban1k", 10)
    ours = run_evaluation(str(checkpoint), "urban1k", str(data), tmp_path / "eval", progress=False,
                          tie_rule="first")["metrics"]["retrieval"]
    with FakeHub(token=TOKEN) as hub:
        env = {**hub_env(hub, tmp_path / "home"), "PYTHONPATH": clip_benchmark_env()["PYTHONPATH"]}
        mteb_recalls = json.loads(run([sys.executable, "-c", MTEB_BY_HUB_ID, str(checkpoint), str(data)], env,
                                      tmp_path).splitlines()[-1])
        module = [sys.executable, "-m", "hf_longclip.integrations.clip_benchmark"]
        run([*module, "write-wds", "--dataset", "urban1k", "--data-dir", str(data), "--output-dir", "wds"], env,
            tmp_path)
        run([*module, "eval", "--model_type", "hf_longclip", "--model", "himo", "--pretrained", "org/himo",
             "--dataset", "wds/urban1k", "--dataset_root", "wds", "--task", "zeroshot_retrieval", "--recall_k", "1",
             "--no_amp", "--num_workers", "0", "--output", "hub.json"], env, tmp_path)
    theirs = json.loads((tmp_path / "hub.json").read_text())
    assert theirs["pretrained"] == "org/himo" and ours["ties_i2t"] == ours["ties_t2i"] == 0
    assert theirs["metrics"]["text_retrieval_recall@1"] == pytest.approx(ours["r1_i2t"] / 100, abs=1e-6)
    assert theirs["metrics"]["image_retrieval_recall@1"] == pytest.approx(ours["r1_t2i"] / 100, abs=1e-6)
    assert mteb_recalls["Urban1kI2TRetrieval"] == pytest.approx(ours["r1_i2t"] / 100, abs=5e-6)
    assert mteb_recalls["Urban1kT2IRetrieval"] == pytest.approx(ours["r1_t2i"] / 100, abs=5e-6)
    assert (tmp_path / "mteb-results/results/org__himo").is_dir()  # filed under the Hub id
