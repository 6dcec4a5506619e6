"""MTEB (the real `mteb` 2.26: `mteb.evaluate`, its retrieval evaluator and result cache) runs our checkpoints on a
long-caption benchmark read from local files, offline, and scores them as `hf-longclip eval` does: one caption per
image, so MTEB's recall@1 is R@1 over 100 both ways; nDCG@10 is the main score."""

import json

import mteb
import pytest
from mteb.cache import ResultCache

from helpers.benchmark_files import karpathy_image, write_image, write_json
from helpers.harnesses import long_caption, save_dual_encoder, scene_captions, write_urban1k
from hf_longclip.evaluation import run_evaluation
from hf_longclip.integrations.mteb import LongCLIPEncoder, long_caption_task, long_caption_tasks, model_meta

IMAGES = 10


def scores(tmp_path, name: str, captions=None) -> tuple[dict, dict, object]:
    """({task name: MTEB's test scores}, `hf-longclip eval`'s retrieval metrics, the result cache) of model `name`."""
    data = write_urban1k(tmp_path / "Urban1k", IMAGES, captions)
    checkpoint = str(save_dual_encoder(name, tmp_path / name))
    cache = ResultCache(tmp_path / "mteb")
    results = mteb.evaluate(model_meta(checkpoint), long_caption_tasks("urban1k", str(data)), cache=cache,
                            show_progress_bar=False)
    ours = run_evaluation(checkpoint, "urban1k", str(data), tmp_path / "eval", progress=False, tie_rule="first")
    return ({result.task_name: result.scores["test"][0] for result in results.task_results},
            ours["metrics"]["retrieval"], cache)


def assert_same_recalls(theirs: dict, ours: dict) -> None:
    assert ours["ties_i2t"] == ours["ties_t2i"] == 0  # no tie decides a recall
    for direction, task in (("i2t", "Urban1kI2TRetrieval"), ("t2i", "Urban1kT2IRetrieval")):
        for k in (1, 5, 10):  # MTEB rounds its scores to 5 decimals
            assert theirs[task][f"recall_at_{k}"] == pytest.approx(ours[f"r{k}_{direction}"] / 100, abs=5e-6)
        assert theirs[task]["main_score"] == theirs[task]["ndcg_at_10"]


def test_mteb_runs_himo_clip_offline_and_writes_its_results(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    theirs, ours, cache = scores(tmp_path, "himo_clip")
    assert_same_recalls(theirs, ours)
    assert 0 < ours["r1_i2t"] < 100 or 0 < ours["r5_t2i"] < 100  # a ranking, not a constant
    written = sorted(path.name for path in (tmp_path / "mteb").rglob("*.json"))
    assert written == ["Urban1kI2TRetrieval.json", "Urban1kT2IRetrieval.json", "model_meta.json"]
    meta = json.loads(next((tmp_path / "mteb").rglob("model_meta.json")).read_text())
    assert meta["name"] == "local/himo_clip" and meta["max_tokens"] == 248 and meta["modalities"] == ["image", "text"]
    tasks = long_caption_tasks("urban1k", str(tmp_path / "Urban1k"))
    again = mteb.evaluate(model_meta(str(tmp_path / "himo_clip")), tasks, cache=cache, overwrite_strategy="only-cache",
                          show_progress_bar=False)
    assert {result.task_name: result.scores["test"][0]["ndcg_at_10"] for result in again.task_results} == \
        {task: values["ndcg_at_10"] for task, values in theirs.items()}  # read back from what MTEB wrote


@pytest.mark.parametrize("name", ["clip", "ditm", "onelip", "fcast"])
def test_mteb_scores_every_model_class_as_hf_longclip_eval(tmp_path, name):
    theirs, ours, _ = scores(tmp_path, name, scene_captions(IMAGES) if name == "fcast" else None)
    assert_same_recalls(theirs, ours)


def test_tasks_name_their_direction_and_read_the_rows_in_hf_longclip_evals_order(tmp_path):
    data = write_urban1k(tmp_path / "Urban1k", 3)
    i2t, t2i = long_caption_tasks("urban1k", str(data))
    assert (type(i2t).__name__, type(t2i).__name__) == ("Urban1kI2TRetrieval", "Urban1kT2IRetrieval")
    assert i2t.metadata.type == "Any2AnyRetrieval" and i2t.metadata.main_score == "ndcg_at_10"
    i2t.load_data()
    split = i2t.dataset["default"]["test"]
    assert split["queries"]["id"] == ["image-0", "image-1", "image-2"]
    assert split["relevant_docs"] == {f"image-{i}": {f"text-{i}": 1} for i in range(3)}
    with pytest.raises(ValueError, match="direction"):
        long_caption_task("urban1k", str(data), "i2i")
    with pytest.raises(ValueError, match="data-dir"):
        long_caption_tasks("urban1k", None)
    assert LongCLIPEncoder.__name__ in repr(model_meta(str(save_dual_encoder("himo_clip", tmp_path / "m"))).loader)


def test_several_captions_per_image_image_to_text_recall_is_mtebs_hit_rate(tmp_path):
    entries = [karpathy_image(index, "test", "val2014", count=3) for index in range(IMAGES)]
    for entry in entries:
        entry["sentences"] = [{**sentence, "raw": long_caption(3 * entry["imgid"] + k)}
                              for k, sentence in enumerate(entry["sentences"])]
        write_image(tmp_path / "coco/val2014" / entry["filename"], entry["imgid"], size=(48, 40))
    write_json(tmp_path / "coco/dataset_coco.json", {"images": entries})
    checkpoint = str(save_dual_encoder("himo_clip", tmp_path / "himo_clip"))
    results = mteb.evaluate(model_meta(checkpoint), long_caption_tasks("coco", str(tmp_path / "coco")),
                            cache=ResultCache(tmp_path / "mteb"), show_progress_bar=False)
    theirs = {result.task_name: result.scores["test"][0] for result in results.task_results}
    ours = run_evaluation(checkpoint, "coco", str(tmp_path / "coco"), tmp_path / "eval", progress=False,
                          tie_rule="first")["metrics"]["retrieval"]
    assert ours["num_texts"] == 3 * IMAGES and ours["ties_i2t"] == ours["ties_t2i"] == 0
    for k in (1, 5, 10):
        assert theirs["COCOI2TRetrieval"][f"hit_rate_at_{k}"] == pytest.approx(ours[f"r{k}_i2t"] / 100, abs=5e-6)
        assert theirs["COCOT2IRetrieval"][f"recall_at_{k}"] == pytest.approx(ours[f"r{k}_t2i"] / 100, abs=5e-6)
    assert theirs["COCOI2TRetrieval"]["recall_at_1"] <= 1 / 3  # MTEB's recall: the share of the 3 captions found
