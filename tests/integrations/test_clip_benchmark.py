"""LAION's CLIP_benchmark (the real `clip-benchmark` 1.6.2: its command line, webdataset reader and retrieval code)
scores our checkpoints on a long-caption benchmark written by `write-wds`, as `hf-longclip eval` scores them.

Its command line runs in a child process (`python -m hf_longclip.integrations.clip_benchmark`, as a user runs it),
with torchvision replaced by placeholders where it does not import (helpers/placeholders/sitecustomize.py says why).
The captions of two neighbouring images share their first 20 words (well over 77 tokens), so a model read at 77
tokens would tie them: equal recalls at the full length say that CLIP_benchmark read the whole caption."""

import csv
import io
import json
import subprocess
import sys
import tarfile

import datasets
import pytest
import torch
from PIL import Image

from helpers.builders import random_images, tiny_himo, tiny_processor
from helpers.harnesses import clip_benchmark_env, long_caption, save_dual_encoder, scene_captions, write_urban1k
from hf_longclip.data.benchmarks import IMAGE, TEXTS, load_benchmark
from hf_longclip.evaluation import encode_images, encode_texts, run_evaluation
from hf_longclip.integrations.clip_benchmark import ImageLayout, ImageTransform, TextTokenizer, write_wds

IMAGES = 10
KS = (1, 5)


def clip_benchmark(*args: str, cwd) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "hf_longclip.integrations.clip_benchmark", *args]
    result = subprocess.run(command, cwd=cwd, env=clip_benchmark_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def score(tmp_path, names: list[str], captions=None) -> dict[str, tuple[dict, dict]]:
    """{model: (CLIP_benchmark's result JSON, `hf-longclip eval`'s retrieval metrics)} on one Urban1k folder."""
    write_urban1k(tmp_path / "Urban1k", IMAGES, captions)
    clip_benchmark("write-wds", "--dataset", "urban1k", "--data-dir", "Urban1k", "--output-dir", "wds/urban1k",
                   "--shard-size", "4", cwd=tmp_path)
    pairs = [f"{name},{save_dual_encoder(name, tmp_path / name)}" for name in names]
    clip_benchmark("eval", "--model_type", "hf_longclip", "--pretrained_model", *pairs, "--dataset", "wds/urban1k",
                   "--dataset_root", "wds/urban1k", "--task", "zeroshot_retrieval", "--recall_k", *map(str, KS),
                   "--no_amp", "--num_workers", "0", "--batch_size", "3", "--output", "{model}.json", cwd=tmp_path)
    return {name: (json.loads((tmp_path / f"{name}.json").read_text()),
                   run_evaluation(str(tmp_path / name), "urban1k", str(tmp_path / "Urban1k"), tmp_path / f"ev-{name}",
                                  progress=False, tie_rule="first")["metrics"]["retrieval"])
            for name in names}


def assert_same_recalls(ours: dict, theirs: dict) -> None:
    assert ours["tie_rule"] == "first" and ours["ties_i2t"] == ours["ties_t2i"] == 0  # no tie decides a recall
    for k in KS:  # CLIP_benchmark's fractions (float32) against our percentages
        assert theirs["metrics"][f"text_retrieval_recall@{k}"] == pytest.approx(ours[f"r{k}_i2t"] / 100, abs=1e-6)
        assert theirs["metrics"][f"image_retrieval_recall@{k}"] == pytest.approx(ours[f"r{k}_t2i"] / 100, abs=1e-6)


@pytest.mark.slow
def test_clip_benchmark_scores_a_plain_clip_export_ditm_and_onelip_as_hf_longclip_eval(tmp_path):
    """(HiMo-CLIP: tests/integrations/test_harness_docs.py runs the documented commands on it.)"""
    names = ["clip", "ditm", "onelip"]
    results = score(tmp_path, names)
    for name, (theirs, ours) in results.items():
        assert theirs["task"] == "zeroshot_retrieval" and theirs["dataset"] == "wds/urban1k"
        assert theirs["model"] == name and theirs["pretrained"] == str(tmp_path / name)
        assert_same_recalls(ours, theirs)
    clip_benchmark("build", *(f"{name}.json" for name in names), "--output", "benchmark.csv", cwd=tmp_path)
    rows = list(csv.DictReader((tmp_path / "benchmark.csv").open()))
    assert sorted(row["model"] for row in rows) == names
    assert {row["model"]: float(row["text_retrieval_recall@1"]) for row in rows} == \
        {name: theirs["metrics"]["text_retrieval_recall@1"] for name, (theirs, _) in results.items()}


@pytest.mark.slow
def test_clip_benchmark_scores_fcast_with_its_superpixel_maps_as_hf_longclip_eval(tmp_path):
    (theirs, ours), = score(tmp_path, ["fcast"], scene_captions(IMAGES)).values()
    assert_same_recalls(ours, theirs)


def test_write_wds_writes_the_layout_clip_benchmark_reads(tmp_path):
    captions = [[long_caption(0)], ["", "two\nlines"], [long_caption(3), "a\r\nb"], [long_caption(4)], ["x"]]
    rows = datasets.Dataset.from_dict({"image": random_images(5), "captions": captions},
                                      features=datasets.Features({"image": IMAGE, "captions": TEXTS}))
    root = write_wds(rows, tmp_path / "wds", shard_size=2, manifest={"benchmark": "test"})
    assert (root / "dataset_type.txt").read_text().strip() == "retrieval"
    assert (root / "test/nshards.txt").read_text().strip() == "3"
    members = {}
    for shard in range(3):
        with tarfile.open(root / f"test/{shard}.tar") as tar:
            members.update({member.name: tar.extractfile(member).read() for member in tar.getmembers()})
    assert sorted(members) == [f"{i:08d}.{ext}" for i in range(5) for ext in ("png", "txt")]
    lines = [members[f"{i:08d}.txt"].decode().splitlines() for i in range(5)]  # as CLIP_benchmark splits them
    assert lines == [[long_caption(0)], [" ", "two lines"], [long_caption(3), "a b"], [long_caption(4)], ["x"]]
    assert Image.open(io.BytesIO(members["00000001.png"])).tobytes() == random_images(5)[1].tobytes()  # lossless
    manifest = json.loads((root / "hf_longclip.json").read_text())
    assert manifest["num_images"] == 5 and manifest["num_texts"] == 7 and manifest["benchmark"] == "test"


def test_the_harness_reads_texts_and_images_as_hf_longclip_eval(tmp_path):
    model, processor = tiny_himo(), tiny_processor()
    captions = [long_caption(0), long_caption(1)]
    tokens = TextTokenizer(model, processor)(captions)
    assert tokens["input_ids"].shape[1] > 77  # the model's length, not CLIP's
    layout = ImageLayout(processor)
    images = [image.convert("RGB") for image in load_benchmark(
        "urban1k", write_urban1k(tmp_path / "Urban1k", 2)).dataset["image"]]
    from hf_longclip.integrations.clip_benchmark import CLIPBenchmarkModel

    wrapper = CLIPBenchmarkModel(model, layout)
    with torch.no_grad():
        texts = torch.nn.functional.normalize(wrapper.encode_text(tokens), dim=-1)
        pixels = torch.stack([ImageTransform(processor, layout)(image) for image in images])
        image_embeds = torch.nn.functional.normalize(wrapper.encode_image(pixels), dim=-1)
    # the same forward on the same inputs, batched alike: equal to the last bit
    assert torch.equal(texts, encode_texts(model, processor, captions))
    assert torch.equal(image_embeds, encode_images(model, processor, images))


def in_process(tmp_path, captions, batch_size: int = 3) -> tuple[dict, object, object]:
    """CLIP_benchmark's own `zeroshot_retrieval.evaluate` (no torchvision on its path) over our loader's model,
    transform and tokenizer, the Urban1k rows batched as its webdataset reader batches them; and the rows."""
    from clip_benchmark.metrics import zeroshot_retrieval

    from hf_longclip.integrations.clip_benchmark import load_hf_longclip

    checkpoint = save_dual_encoder("himo_clip", tmp_path / "himo_clip")
    rows = load_benchmark("urban1k", write_urban1k(tmp_path / "Urban1k", len(captions), captions)).dataset
    model, transform, tokenizer = load_hf_longclip("himo_clip", str(checkpoint), device="cpu")
    batches = [(torch.stack([transform(image) for image in rows[start:start + batch_size]["image"]]),
                [[caption] for caption in rows[start:start + batch_size]["caption"]])
               for start in range(0, len(rows), batch_size)]
    metrics = zeroshot_retrieval.evaluate(model.eval(), batches, tokenizer, "cpu", amp=False, recall_k_list=[1, 5])
    return metrics, checkpoint, tmp_path / "Urban1k"


def ours(checkpoint, data, output, tie_rule: str) -> dict:
    return run_evaluation(str(checkpoint), "urban1k", str(data), output, progress=False,
                          tie_rule=tie_rule)["metrics"]["retrieval"]


def test_clip_benchmarks_retrieval_code_scores_our_loader_as_hf_longclip_eval(tmp_path):
    theirs, checkpoint, data = in_process(tmp_path, [long_caption(index) for index in range(IMAGES)])
    assert_same_recalls(ours(checkpoint, data, tmp_path / "eval", "first"), {"metrics": theirs})


def test_a_tie_in_clip_benchmark_lands_between_the_pessimistic_and_optimistic_rules(tmp_path):
    captions = [long_caption(0)] * 5 + [long_caption(index) for index in range(5, IMAGES)]  # five images, one caption
    theirs, checkpoint, data = in_process(tmp_path, captions)
    low, high = (ours(checkpoint, data, tmp_path / rule, rule) for rule in ("pessimistic", "optimistic"))
    assert low["ties_i2t"] > 0 and any(low[f"r{k}_i2t"] < high[f"r{k}_i2t"] for k in KS)  # ties decide recalls
    for k in KS:
        assert low[f"r{k}_i2t"] / 100 - 1e-6 <= theirs[f"text_retrieval_recall@{k}"] <= high[f"r{k}_i2t"] / 100 + 1e-6
