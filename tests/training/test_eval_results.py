"""The Hub's evaluation results: `.eval_results/*.yaml` files in huggingface_hub's own format (`EvalResultEntry`,
read back here with its `parse_eval_result_entries`), one per benchmark and metric, the protocol in the source,
pushed by the training loop's `push_to_hub` and by `hf-longclip eval --push-to-hub` to the loopback fake Hub (in a
child process whose environment names it: tests/helpers/hub.py)."""

import json
import subprocess
import sys

import pytest
import yaml
from huggingface_hub import parse_eval_result_entries

from helpers.builders import CAPTIONS, tiny_himo, tiny_processor
from helpers.fake_hub import FakeHub
from helpers.fresh_process import save_checkpoint
from helpers.harnesses import write_urban1k
from helpers.hub import TOKEN, hub_env
from hf_longclip.evaluation import run_evaluation
from hf_longclip.training.hub import (
    HUB_DATASETS,
    eval_result_entries,
    eval_results_files,
    report_eval_results,
    training_eval_results,
)

RESULTS = {"r1_i2t": 20.3, "r1_t2i": 22.7, "himo@k": 0.881, "num_images": 64, "ties_i2t": 0, "tie_rule": "fair",
           "mean_similarity_by_prefix": [0.21, 0.24], "broken": float("nan"), "flag": True}
DATE = "2026-12-02T00:00:00Z"


def parsed(files: dict[str, str]) -> dict:
    """{path: the one entry of each file}, parsed as the Hub reads them."""
    out = {}
    for path, text in files.items():
        entries = parse_eval_result_entries(yaml.safe_load(text))
        assert len(entries) == 1, path
        out[path] = entries[0]
    return out


def test_one_file_per_metric_in_the_hubs_format_with_the_protocol_in_the_source():
    entries = eval_result_entries(RESULTS, dataset_id="BeichenZhang/Urban1k", protocol="split test, 248 tokens",
                                  source_url="https://huggingface.co/org/m", task="retrieval", date=DATE)
    files = parsed(eval_results_files(entries))
    assert sorted(files) == [f".eval_results/urban1k_retrieval_{key}.yaml" for key in ("himo@k", "r1_i2t", "r1_t2i")]
    # counts, lists, NaN and flags are left out
    entry = files[".eval_results/urban1k_retrieval_r1_i2t.yaml"]
    assert (entry.dataset_id, entry.task_id, entry.value, entry.date) == ("BeichenZhang/Urban1k", "retrieval/r1_i2t",
                                                                          20.3, DATE)
    assert (entry.source_url, entry.source_name) == ("https://huggingface.co/org/m", "split test, 248 tokens")
    raw = yaml.safe_load(eval_results_files(entries)[".eval_results/urban1k_retrieval_r1_i2t.yaml"])
    assert raw == [{"dataset": {"id": "BeichenZhang/Urban1k", "task_id": "retrieval/r1_i2t"}, "value": 20.3,
                    "date": DATE, "source": {"url": "https://huggingface.co/org/m", "name": "split test, 248 tokens"},
                    "notes": "split test, 248 tokens"}]


def test_an_eval_report_names_its_benchmarks_dataset_split_text_length_and_tie_rule(tmp_path):
    model, processor = tiny_himo(), tiny_processor()
    model.save_pretrained(tmp_path / "m")
    processor.save_pretrained(tmp_path / "m")
    report = run_evaluation(str(tmp_path / "m"), "urban1k", str(write_urban1k(tmp_path / "Urban1k", 4)),
                            tmp_path / "eval", progress=False)
    entries = report_eval_results(report, "https://huggingface.co/org/m", date=DATE)
    retrieval = {entry.task_id: entry for entry in entries if entry.task_id.startswith("retrieval/")}
    assert retrieval["retrieval/r1_i2t"].value == report["metrics"]["retrieval"]["r1_i2t"]
    assert {entry.dataset_id for entry in entries} == {HUB_DATASETS["urban1k"]}
    source = retrieval["retrieval/r1_t2i"].source_name
    assert "split test" in source and "248 tokens" in source and "ties first" in source  # Long-CLIP's argmax
    assert {entry.dataset_id for entry in report_eval_results(report, "u", dataset_id="me/urban")} == {"me/urban"}


def test_training_results_are_named_by_the_cards_dataset_and_the_models_length():
    entries = training_eval_results(RESULTS, "org/m", {"text_config": {"max_position_embeddings": 248}}, date=DATE)
    assert {entry.dataset_id for entry in entries} == {"synthetic-long-caption-scenes"}
    assert all("248 tokens" in entry.source_name and "ties fair" in entry.source_name for entry in entries)
    assert all(entry.source_url.endswith("/org/m") for entry in entries)


PUSH_AND_EVAL = """
import json, sys
from hf_longclip.cli import main
from hf_longclip.training.hub import push_to_hub, training_eval_results
checkpoint, data, results = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = json.load(open(f"{checkpoint}/config.json"))
print(push_to_hub(checkpoint, "org/himo", card=None, eval_results=training_eval_results(results, "org/himo", config)))
main(["eval", "--model", checkpoint, "--dataset", "urban1k", "--data-dir", data, "--output-dir", "eval",
      "--push-to-hub", "org/himo"])
"""


def test_training_push_and_eval_push_write_eval_results_to_the_hub(tmp_path):
    save_checkpoint(tiny_himo(), tiny_processor(), CAPTIONS, tmp_path / "himo")
    data = write_urban1k(tmp_path / "Urban1k", 4)
    with FakeHub(token=TOKEN) as hub:
        result = subprocess.run([sys.executable, "-c", PUSH_AND_EVAL, str(tmp_path / "himo"), str(data),
                                 json.dumps(RESULTS)], env=hub_env(hub, tmp_path / "home"), cwd=tmp_path,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        repo = hub.repos["org/himo"].at("main")
        files = {name: hub.file("org/himo", name).decode() for name in repo.files if name.startswith(".eval_results/")}
    assert "model.safetensors" in repo.files  # the checkpoint, and beside it:
    entries = parsed(files)
    training = {entry.task_id: entry.value for entry in entries.values()
                if entry.dataset_id == "synthetic-long-caption-scenes"}
    assert training == {"r1_i2t": 20.3, "r1_t2i": 22.7, "himo@k": 0.881}
    report = json.loads((tmp_path / "eval/report.json").read_text())
    evaluated = {entry.task_id: entry.value for entry in entries.values() if entry.dataset_id == "BeichenZhang/Urban1k"}
    assert evaluated["retrieval/r1_i2t"] == report["metrics"]["retrieval"]["r1_i2t"]
    assert evaluated["retrieval/rsum"] == pytest.approx(report["metrics"]["retrieval"]["rsum"])
    assert "pushed" in result.stdout and not (tmp_path / "himo/.eval_results").exists()  # the checkpoint untouched
