"""COCO 1K (5-fold mean over the 5K test split) and Crisscrossed Captions (CxC) retrieval, the latter loaded from a
fixture written in the real CSV format of google-research-datasets/Crisscrossed-Captions (data/*_test.csv)."""

import csv
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from hf_longclip.data.benchmarks import CXC_THRESHOLDS, load_coco_cxc, read_cxc
from hf_longclip.evaluation import available_tasks, cxc_positive_sets, cxc_task, retrieval_task
from hf_longclip.metrics.retrieval import (
    cxc_retrieval,
    fold_retrieval,
    long_text_retrieval,
    multi_positive_recall,
)


def naive_recall(scores: np.ndarray, positives: list[list[int]], k: int, exclude_self: bool = False):
    """Percent of queries with a positive whose best positive is in the top k (ties in the query's favour)."""
    hits, count = 0, 0
    for query, items in enumerate(positives):
        row = scores[query].astype(float).copy()
        items = [item for item in items if not (exclude_self and item == query)]
        if exclude_self:
            row[query] = -np.inf
        if not items:
            continue
        count += 1
        hits += int((row > max(row[item] for item in items)).sum() < k)
    return 100 * hits / count if count else float("nan")


# ---------------------------------------------------------------------------------------------------------------
# COCO 1K
# ---------------------------------------------------------------------------------------------------------------
def test_fold_retrieval_is_the_mean_of_independent_per_fold_recalls():
    generator = torch.Generator().manual_seed(0)
    num_images, per_image, folds = 20, 3, 5
    images = torch.nn.functional.normalize(torch.randn(num_images, 6, generator=generator), dim=-1)
    owners = torch.arange(num_images).repeat_interleave(per_image)
    texts = torch.nn.functional.normalize(images[owners] + 0.9 * torch.randn(len(owners), 6, generator=generator),
                                          dim=-1)
    order = torch.randperm(len(owners), generator=generator)  # captions shuffled: folds follow their image
    texts, owners = texts[order], owners[order]
    result = fold_retrieval(images, texts, owners, num_folds=folds)
    per_fold = num_images // folds
    expected = {f"r{k}_{d}": [] for d in ("i2t", "t2i") for k in (1, 5, 10)}
    for fold in range(folds):
        members = [t for t in range(len(owners)) if fold * per_fold <= owners[t] < (fold + 1) * per_fold]
        local = (owners[members] - fold * per_fold).tolist()
        scores = (images[fold * per_fold:(fold + 1) * per_fold] @ texts[members].T).numpy()
        i2t = [[t for t, o in enumerate(local) if o == i] for i in range(per_fold)]
        for k in (1, 5, 10):
            expected[f"r{k}_i2t"].append(naive_recall(scores, i2t, k))
            expected[f"r{k}_t2i"].append(naive_recall(scores.T, [[o] for o in local], k))
        assert result["folds"][fold]["num_images"] == per_fold
        assert result["folds"][fold]["num_texts"] == per_fold * per_image
    for key, values in expected.items():
        assert result[key] == pytest.approx(np.mean(values))
    assert result["rsum"] == pytest.approx(sum(np.mean(v) for v in expected.values()))
    assert result["num_folds"] == folds and result["images_per_fold"] == per_fold
    assert len({round(fold["r1_t2i"], 6) for fold in result["folds"]}) > 1  # the folds really differ
    with pytest.raises(ValueError, match="equal folds"):
        fold_retrieval(images, texts, owners, num_folds=3)


def test_fold_boundaries_are_by_image():
    # image i and its caption share direction i; caption 0 (image 0, fold 0) is closest to image 2 (fold 1):
    # a miss on all images, a hit inside fold 0 where image 2 is not a candidate
    images = torch.eye(4)
    texts = torch.eye(4)
    texts[0] = torch.tensor([0.6, 0.0, 0.8, 0.0])
    full = long_text_retrieval(images, texts, [0, 1, 2, 3], ks=(1,))
    folds = fold_retrieval(images, texts, [0, 1, 2, 3], num_folds=2, ks=(1,))
    assert full["r1_t2i"] == 75.0 and full["r1_i2t"] == 100.0
    assert folds["folds"][0]["r1_t2i"] == 100.0 and folds["r1_t2i"] == 100.0


def test_retrieval_task_reports_5k_and_1k_on_5000_images():
    num = 5000
    generator = torch.Generator().manual_seed(1)
    images = torch.nn.functional.normalize(torch.randn(num, 4, generator=generator), dim=-1)
    texts = torch.nn.functional.normalize(images + 0.5 * torch.randn(num, 4, generator=generator), dim=-1)
    rows = datasets.Dataset.from_dict({"captions": [[str(i)] for i in range(num)]})
    lookup = {str(i): texts[i] for i in range(num)}

    def encode(batch):
        return torch.stack([lookup[text] for text in batch])

    result = retrieval_task(rows, encode, images)
    assert result["num_images"] == num and result["r1_i2t"] == pytest.approx(
        long_text_retrieval(images, texts, list(range(num)))["r1_i2t"])
    assert result["1k"]["num_folds"] == 5 and result["1k"]["images_per_fold"] == 1000
    assert result["1k"]["r1_i2t"] == pytest.approx(fold_retrieval(images, texts, list(range(num)))["r1_i2t"])
    assert result["1k"]["r1_i2t"] > result["r1_i2t"]  # fewer candidates per query
    small = rows.select(range(10))
    assert "1k" not in retrieval_task(small, encode, images[:10])  # not a 5K split: unchanged output
    assert "5" in retrieval_task(small, encode, images[:10], folds=2)  # explicit folds: 2 folds of 5 images


# ---------------------------------------------------------------------------------------------------------------
# Recall with arbitrary positives
# ---------------------------------------------------------------------------------------------------------------
def test_multi_positive_recall_hand_computed():
    # scores = queries @ items.T (3 queries, 4 items)
    queries = torch.eye(3)
    items = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.7, 0.0], [0.1, 0.6, 0.2], [0.0, 0.0, 0.1]])
    # q0 scores (0.9, 0.8, 0.1, 0.0), positives {1}: rank 1 -> miss at 1, hit at 5
    # q1 scores (0.1, 0.7, 0.6, 0.0), positives {2, 3}: best 0.6, rank 1 -> miss at 1
    # q2 has no positive: skipped
    result = multi_positive_recall(queries, items, [[1], [3, 2], []], ks=(1, 2))
    assert result == {"r1": 0.0, "r2": 100.0, "num_queries": 2, "num_without_positive": 1, "tie_rule": "fair"}
    dense = torch.zeros(3, 4, dtype=torch.bool)
    dense[0, 0] = dense[1, 2] = True
    assert multi_positive_recall(queries, items, dense, ks=(1,))["r1"] == 50.0
    # intramodal: the query itself is never a candidate nor a positive
    same = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    intra = multi_positive_recall(same, same, [[0, 1], [2], [2]], ks=(1,), exclude_self=True)
    # q0: candidates q1 (0.9), q2 (0.0), positive q1 -> hit; q1: best other is q0 (0.9) > q2 (0.1) -> miss; q2 only self
    assert intra == {"r1": 50.0, "num_queries": 2, "num_without_positive": 1, "tie_rule": "fair"}
    with pytest.raises(ValueError, match="out of range"):
        multi_positive_recall(queries, items, [[4], [], []])


# ---------------------------------------------------------------------------------------------------------------
# CxC loader, real CSV format
# ---------------------------------------------------------------------------------------------------------------
COCO_IDS = (11, 22, 33, 44)


def coco_name(coco_id: int) -> str:
    return f"COCO_val2014_{coco_id:012d}.jpg"


def sent(sentid: int) -> str:
    return f"COCO_val2014:sentid:{sentid}"


def write_csv(path: Path, header, rows):
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)


@pytest.fixture()
def cxc_dir(tmp_path):
    entries = []
    for index, coco_id in enumerate(COCO_IDS):
        sentids = [coco_id * 10 + 1, coco_id * 10 + 2]
        entries.append({"filepath": "val2014", "filename": coco_name(coco_id), "imgid": index, "split": "test",
                        "cocoid": coco_id, "sentids": sentids,
                        "sentences": [{"raw": f"caption {s}.", "tokens": ["caption"], "imgid": index, "sentid": s}
                                      for s in sentids]})
    entries.append({"filepath": "val2014", "filename": coco_name(55), "imgid": 4, "split": "val", "cocoid": 55,
                    "sentids": [551], "sentences": [{"raw": "a val caption.", "sentid": 551}]})
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
    (tmp_path / "val2014").mkdir()
    for index, entry in enumerate(entries):
        Image.new("RGB", (8, 6), (index * 40, 0, 0)).save(tmp_path / "val2014" / entry["filename"])
    cxc = tmp_path / "cxc"
    cxc.mkdir()
    write_csv(cxc / "sits_test.csv", ["caption", "image", "agg_score", "sampling_method"], [
        [sent(221), coco_name(11), 3.5, "c2i_intrasim"],   # positive: caption of image 22 describes image 11
        [sent(331), coco_name(11), 2.9, "c2i_intrasim"],   # below 3
        [sent(111), coco_name(11), 4.8, "c2i_original"],   # its own caption: positive anyway
        [sent(999), coco_name(44), 4.0, "c2i_intrasim"],   # caption outside the split
    ])
    write_csv(cxc / "sts_test.csv", ["caption1", "caption2", "agg_score", "sampling_method"], [
        [sent(111), sent(221), 4.2, "c2c_isim"],
        [sent(111), sent(112), 2.0, "c2c_cocaption"],      # co-captions rated low: not positive
        [sent(331), sent(332), 3.0, "c2c_cocaption"],      # exactly the threshold
        [sent(441), sent(111), 1.0, "c2c_isim"],
    ])
    write_csv(cxc / "sis_test.csv", ["image1", "image2", "agg_score", "sampling_method"], [
        [coco_name(11), coco_name(22), 3.0, "i2i_csim"],
        [coco_name(33), coco_name(44), 2.4, "i2i_csim"],   # below 2.5
        [coco_name(33), coco_name(11), 2.5, "i2i_csim"],
    ])
    for kind, header in (("sits", "caption,image"), ("sts", "caption1,caption2"), ("sis", "image1,image2")):
        (cxc / f"{kind}_val.csv").write_text(f"{header},agg_score,sampling_method\n")
    return tmp_path


def test_read_cxc_parses_the_real_ids(cxc_dir):
    pairs = read_cxc(cxc_dir / "cxc", "test")
    assert pairs["sits"][0] == (221, 11, 3.5)
    assert pairs["sts"][0] == (111, 221, 4.2) and pairs["sis"][2] == (33, 11, 2.5)
    assert CXC_THRESHOLDS == {"sits": 3.0, "sts": 3.0, "sis": 2.5}
    (cxc_dir / "cxc" / "sis_test.csv").write_text("image1,image2,agg_score,sampling_method\nimg_a.jpg,x,1,i\n")
    with pytest.raises(ValueError, match="line 2.*COCO_val2014_"):
        read_cxc(cxc_dir / "cxc", "test")
    with pytest.raises(ValueError, match="unknown split 'train'"):
        read_cxc(cxc_dir / "cxc", "train")
    (cxc_dir / "cxc" / "sts_val.csv").unlink()
    with pytest.raises(FileNotFoundError, match="sts_val.csv"):
        read_cxc(cxc_dir / "cxc", "val")


def test_load_coco_cxc_maps_ids_onto_rows(cxc_dir):
    bench = load_coco_cxc(cxc_dir)
    rows = bench.dataset
    assert bench.split == "test" and bench.name == "coco_cxc" and rows["image_id"] == list(COCO_IDS)
    assert rows["sentids"][0] == [111, 112] and rows["captions"][0] == ["caption 111.", "caption 112."]
    assert rows["cxc_images"] == [[22, 33], [11], [11], []]
    assert rows["cxc_texts"] == [[221], [], [], [999]]
    assert rows["cxc_caption_positives"] == [[[221], []], [[111], []], [[332], [331]], [[], []]]
    assert "retrieval" in available_tasks(bench.dataset)
    stricter = load_coco_cxc(cxc_dir, thresholds={"sis": 3.0}).dataset
    assert stricter["cxc_images"] == [[22], [11], [], []]
    assert load_coco_cxc(cxc_dir, split="val").dataset["image_id"] == [55]
    with pytest.raises(ValueError, match="unknown CxC threshold"):
        load_coco_cxc(cxc_dir, thresholds={"sit": 3.0})


def test_cxc_recalls_hand_computed(cxc_dir):
    rows = load_coco_cxc(cxc_dir).dataset
    positives, missing = cxc_positive_sets(rows)
    # texts flattened: 111 112 221 222 331 332 441 442 -> indices 0..7
    assert positives["i2t"] == [[0, 1, 2], [2, 3], [4, 5], [6, 7]]
    assert positives["t2i"] == [[0], [0], [1, 0], [1], [2], [2], [3], [3]]
    assert positives["t2t"] == [[2], [], [0], [], [5], [4], [], []]
    assert positives["i2i"] == [[1, 2], [0], [0], []]
    assert missing == 1  # sentid 999 is not in the split
    # one direction per image; captions: 111, 112 -> image 11's direction, 221 -> between 11 and 22, ...
    images = torch.eye(4)
    images[2] = torch.tensor([0.0, 0.0, 1.0, 0.0])
    texts = torch.tensor([
        [1.0, 0.0, 0.0, 0.0],   # 111
        [0.0, 0.0, 0.0, 1.0],   # 112: looks like image 44
        [0.6, 0.8, 0.0, 0.0],   # 221: closer to image 22 (0.8) than 11 (0.6)
        [0.0, 1.0, 0.0, 0.0],   # 222
        [0.0, 0.0, 1.0, 0.0],   # 331
        [0.0, 0.0, 0.8, 0.6],   # 332
        [0.0, 0.0, 0.0, 1.0],   # 441
        [0.0, 0.0, 0.6, 0.8],   # 442
    ])
    # fair ties: image 44's 441 (positive) and 112 tie at 1.0: 1/2; I->I: image 11's positives 22 and 33 tie with
    # image 44 at 0: 2/3; images 22 and 33 tie with two negatives: 1/3 each
    fair = cxc_task(rows, images, texts)
    assert fair["r1_i2t"] == 87.5 and fair["r1_i2i"] == pytest.approx(100 * (2 / 3 + 1 / 3 + 1 / 3) / 3)
    assert fair["r5_i2i"] == 100.0 and fair["tie_rule"] == "fair"
    result = cxc_task(rows, images, texts, tie_rule="optimistic")  # as the brute force below
    # I->T R@1: image 11 best text 111 (1.0, positive) hit; 22 best 222 (1.0) hit; 33 best 331 hit; 44 best 112/441
    # tie at 1.0, 441 is positive -> hit (ties in the query's favour)
    assert result["r1_i2t"] == 100.0
    # T->I R@1: 111 -> 11 hit; 112 -> 44 miss; 221 -> 22 (0.8) hit; 222 hit; 331 hit; 332 -> 33 hit; 441 hit;
    # 442 -> 44 (0.8) hit: 7/8
    assert result["r1_t2i"] == pytest.approx(87.5)
    # T->T (queries with positives: 111, 221, 331, 332): 111 -> best other 221 (0.6)? scores 112:0, 221:0.6,
    # 222:0, 331:0, 332:0, 441:0, 442:0 -> hit; 221 -> 111 (0.6) vs 222 (0.8): miss at 1, hit at 5;
    # 331 -> 332 (0.8) best: hit; 332 -> 331 (0.8) vs 442 (0.48+0.48=0.96): miss at 1, rank 1 -> hit at 5
    assert result["r1_t2t"] == 50.0 and result["r5_t2t"] == 100.0 and result["num_queries_t2t"] == 4
    # I->I (image directions orthogonal: every other image scores 0, ties in the query's favour): 3 queries, all hit
    assert result["r1_i2i"] == 100.0 and result["num_queries_i2i"] == 3
    assert result["num_missing_positives"] == 1
    # the same numbers from an independent brute force
    scores = {"i2t": images @ texts.T, "t2i": texts @ images.T, "t2t": texts @ texts.T, "i2i": images @ images.T}
    for direction, matrix in scores.items():
        for k in (1, 5):
            expected = naive_recall(matrix.numpy(), positives[direction], k, exclude_self=direction in ("t2t", "i2i"))
            assert result[f"r{k}_{direction}"] == pytest.approx(expected)
    assert cxc_retrieval(images, texts, **positives)["r1_t2i"] == pytest.approx(87.5)
    # the retrieval task carries it, next to the plain (5K-style) numbers
    lookup = {text: texts[i] for i, text in enumerate(t for group in rows["captions"] for t in group)}
    report = retrieval_task(rows, lambda batch: torch.stack([lookup[t] for t in batch]), images, tie_rule="optimistic")
    assert report["cxc"] == result and report["num_texts"] == 8


def test_cli_evaluates_coco_cxc_from_its_files(cxc_dir, tmp_path):
    from helpers.builders import tiny_himo, tiny_processor
    from hf_longclip.cli import main as cli_main

    checkpoint = tmp_path / "ckpt"
    tiny_himo().save_pretrained(checkpoint)
    tiny_processor().save_pretrained(checkpoint)
    cli_main(["eval", "--model", str(checkpoint), "--dataset", "coco_cxc", "--data-dir", str(cxc_dir),
              "--tasks", "retrieval", "--device", "cpu", "--output-dir", str(tmp_path / "eval")])
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["dataset"] == "coco_cxc" and report["num_samples"] == 4
    # DITM released no evaluation code: the Karpathy split and CxC keep the fair rule under the "official" default
    assert report["tie_rule"] == "official" and report["tie_rules"] == {"retrieval": "fair"}
    cxc = report["metrics"]["retrieval"]["cxc"]
    assert {"r1_i2t", "r5_t2i", "r1_t2t", "r5_i2i"} <= set(cxc) and cxc["num_missing_positives"] == 1
