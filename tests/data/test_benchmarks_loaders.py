"""Loaders of the real benchmark formats, each tested on a tiny fixture written in exactly that on-disk format."""

import csv
import logging
from pathlib import Path

import datasets
import pytest
from PIL import Image

from helpers.benchmark_files import (
    HIERARCAPS_ROWS,
    color,
    karpathy_image,
    write_corrupt,
    write_hierarcaps,
    write_image,
    write_json,
    write_jsonl,
    write_truncated,
)
from hf_longclip.data.benchmarks import (
    BENCHMARKS,
    SCHEMA_FIELDS,
    SHAREGPT4V_TEST_SIZE,
    Benchmark,
    describe_benchmarks,
    load_benchmark,
    schema_fields,
)
from hf_longclip.evaluation import TASKS, available_tasks
from hf_longclip.modeling_common.text import split_sentences

NAMES = {"sharegpt4v", "urban1k", "docci", "long_dci", "himo_docci", "coco", "flickr30k", "hierarcaps", "cola_multi",
         "coco_cxc", "imagefolder"}
LONG = "A red bus stops at a corner. Two people wait beside it! Is the sky grey? Yes, it is overcast."


def pixel(image) -> tuple[int, int, int]:
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    return image.getpixel((image.width // 2, image.height // 2))


def assert_color(image, index: int):
    assert all(abs(a - b) <= 12 for a, b in zip(pixel(image), color(index))), (pixel(image), color(index))


# ---------------------------------------------------------------------------------------------------------------
# Registry and helpers
# ---------------------------------------------------------------------------------------------------------------
def test_registry_names_fields_and_descriptions():
    assert set(BENCHMARKS) == NAMES
    for name, spec in BENCHMARKS.items():
        assert spec.name == name and spec.default_split == spec.splits[0]
        assert spec.fields <= set(SCHEMA_FIELDS) and "id" in spec.fields
    assert schema_fields("himo_docci") == {"id", "image", "caption", "sentences", "subtexts"}
    assert schema_fields("coco") == {"id", "image", "caption", "sentences", "captions"}
    assert schema_fields("hierarcaps") == {"id", "image", "caption", "sentences", "levels", "image_id"}
    assert schema_fields("cola_multi") == {"id", "images", "captions"}
    assert BENCHMARKS["sharegpt4v"].splits == ("test", "train") and BENCHMARKS["coco"].default_split == "test"
    lines = list(describe_benchmarks())
    assert len(lines) == len(NAMES) and lines[0].startswith("coco: ")
    with pytest.raises(ValueError, match="unknown benchmark 'imagenet'.*urban1k"):
        load_benchmark("imagenet", ".")
    with pytest.raises(ValueError, match="unknown benchmark"):
        schema_fields("nope")


def test_available_tasks_on_plain_datasets():
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string"),
                                  "sentences": datasets.List(datasets.Value("string"))})
    single = datasets.Dataset.from_list([{"image": Image.new("RGB", (2, 2)), "caption": "a cat.",
                                          "sentences": ["a cat."]}], features=features)
    assert available_tasks(single) == ("retrieval",)
    multi = datasets.Dataset.from_list([{"image": Image.new("RGB", (2, 2)), "caption": LONG,
                                         "sentences": split_sentences(LONG)}], features=features)
    assert available_tasks(multi) == ("retrieval", "himo")
    assert available_tasks(multi.select([])) == ("retrieval",)  # rows selected away: no prefixes to compare
    assert schema_fields(multi) == {"image", "caption", "sentences"}
    assert tuple(TASKS) == ("retrieval", "himo", "ssi", "hierarcaps", "zero_shot", "cola")


def test_missing_data_dir_names_path_and_format(tmp_path):
    missing = tmp_path / "nowhere"
    for name in sorted(NAMES):
        with pytest.raises(FileNotFoundError, match="nowhere") as error:
            load_benchmark(name, missing)
        assert "directory not found" in str(error.value)


# ---------------------------------------------------------------------------------------------------------------
# ShareGPT4V
# ---------------------------------------------------------------------------------------------------------------
SHAREGPT4V_JSON = "share-captioner_coco_lcs_sam_1246k_1107.json"


def sharegpt4v_record(index: int, image: str) -> dict:
    return {"id": f"rec{index}", "image": image, "conversations": [
        {"from": "human", "value": "<image>\nWhat is in the image?"},
        {"from": "gpt", "value": f"Record {index} shows a scene.\nIt has {index} objects."}]}


@pytest.fixture(scope="module")
def sharegpt4v_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharegpt4v")
    shared = [f"coco/train2017/{k:012d}.jpg" for k in range(3)]
    for k, image in enumerate(shared):
        write_image(root / image, k)
    write_corrupt(root / "sam/images/sa_corrupt.jpg")
    records = [sharegpt4v_record(i, shared[i % 3]) for i in range(SHAREGPT4V_TEST_SIZE + 3)]
    records[5]["image"] = "sam/images/sa_corrupt.jpg"
    write_json(root / SHAREGPT4V_JSON, records)
    return root


def test_sharegpt4v_first_1000_are_the_test_split(sharegpt4v_dir, caplog):
    assert SHAREGPT4V_TEST_SIZE == 1000
    with caplog.at_level(logging.WARNING, logger="hf_longclip.data.benchmarks"):
        bench = load_benchmark("sharegpt4v", sharegpt4v_dir)
    assert isinstance(bench, Benchmark) and bench.split == "test" and bench.name == "sharegpt4v"
    assert len(bench) == 999 and bench.num_skipped == 1
    assert bench.skipped_paths == [str(sharegpt4v_dir / "sam/images/sa_corrupt.jpg")]
    assert "sa_corrupt.jpg" in caplog.text
    ids = bench.dataset["id"]
    assert ids[:6] == ["rec0", "rec1", "rec2", "rec3", "rec4", "rec6"] and ids[-1] == "rec999"
    row = bench.dataset[3]
    assert row["caption"] == "Record 3 shows a scene. It has 3 objects."  # newline -> space, as Long-CLIP
    assert row["sentences"] == ["Record 3 shows a scene.", "It has 3 objects."]
    assert_color(row["image"], 0)
    assert_color(bench.dataset[4]["image"], 1)
    assert available_tasks(bench.dataset) == ("retrieval", "himo")
    assert bench.fields == {"id", "image", "caption", "sentences"}


def test_sharegpt4v_train_split_and_max_samples(sharegpt4v_dir):
    train = load_benchmark("sharegpt4v", sharegpt4v_dir, split="train")
    assert train.dataset["id"] == ["rec1000", "rec1001", "rec1002"] and train.num_skipped == 0
    assert_color(train.dataset[0]["image"], 1000 % 3)
    first = load_benchmark("sharegpt4v", sharegpt4v_dir, max_samples=7)
    assert first.dataset["id"] == ["rec0", "rec1", "rec2", "rec3", "rec4", "rec6", "rec7"]  # 7 readable rows
    assert first.num_skipped == 1
    with pytest.raises(ValueError, match="unknown split 'val'"):
        load_benchmark("sharegpt4v", sharegpt4v_dir, split="val")
    with pytest.raises(ValueError, match="max_samples"):
        load_benchmark("sharegpt4v", sharegpt4v_dir, max_samples=0)


def test_sharegpt4v_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=SHAREGPT4V_JSON.replace(".", r"\.")) as error:
        load_benchmark("sharegpt4v", tmp_path)
    assert "ShareGPT4V" in str(error.value)
    write_image(tmp_path / "a.jpg", 0)
    bad = sharegpt4v_record(1, "a.jpg")
    bad["conversations"] = [{"from": "human", "value": "describe"}]
    write_json(tmp_path / SHAREGPT4V_JSON, [sharegpt4v_record(0, "a.jpg"), bad])
    with pytest.raises(ValueError, match=rf"{SHAREGPT4V_JSON}: malformed record 1: no .*gpt"):
        load_benchmark("sharegpt4v", tmp_path)
    write_json(tmp_path / SHAREGPT4V_JSON, [{"id": "x", "conversations": []}])
    with pytest.raises(ValueError, match="malformed record 0: missing key 'image'"):
        load_benchmark("sharegpt4v", tmp_path)
    # every referenced image missing: a wrong image root, reported as such instead of an empty benchmark
    write_json(tmp_path / SHAREGPT4V_JSON, [sharegpt4v_record(0, "nope/b.jpg")])
    with pytest.raises(FileNotFoundError, match="none of the images.*nope/b.jpg"):
        load_benchmark("sharegpt4v", tmp_path)
    # a separate image root, and an alternative annotation file of the same format
    write_image(tmp_path / "imgs/nope/b.jpg", 4)
    write_json(tmp_path / "cap100k.json", [sharegpt4v_record(0, "nope/b.jpg")])
    bench = load_benchmark("sharegpt4v", tmp_path, annotation_file="cap100k.json", image_root="imgs")
    assert_color(bench.dataset[0]["image"], 4)
    assert bench.source.endswith("cap100k.json")


# ---------------------------------------------------------------------------------------------------------------
# Urban1k
# ---------------------------------------------------------------------------------------------------------------
def test_urban1k(tmp_path, caplog):
    for index in (1, 2, 3):
        write_image(tmp_path / f"image/{index}.jpg", index)
        (tmp_path / "caption").mkdir(exist_ok=True)
        (tmp_path / f"caption/{index}.txt").write_text(f"Caption {index}. {LONG}\nsecond line ignored\n")
    write_truncated(tmp_path / "image/4.jpg")  # opens fine, fails only when decoded
    (tmp_path / "caption/4.txt").write_text("Truncated image.")
    (tmp_path / "caption/5.txt").write_text("No image at all.")
    (tmp_path / "caption/3.txt").write_text(f"\ufeffCaption 3. {LONG}\r\nsecond line\r\n", encoding="utf-8")
    write_image(tmp_path / "image/9.jpg", 9)  # an image without caption is ignored
    with caplog.at_level(logging.WARNING, logger="hf_longclip.data.benchmarks"):
        bench = load_benchmark("urban1k", tmp_path)
    assert bench.dataset["id"] == ["1", "2", "3"] and bench.num_skipped == 2
    assert sorted(bench.skipped_paths) == [str(tmp_path / "image/4.jpg"), str(tmp_path / "image/5.jpg")]
    assert "4.jpg" in caplog.text and "5.jpg" in caplog.text
    row = bench.dataset[1]
    assert row["caption"] == f"Caption 2. {LONG}"
    assert row["sentences"] == ["Caption 2.", *split_sentences(LONG)] and len(row["sentences"]) == 5
    assert bench.dataset[2]["caption"] == f"Caption 3. {LONG}"  # BOM and CRLF do not leak into the caption
    assert_color(row["image"], 2)
    assert available_tasks(bench.dataset) == ("retrieval", "himo")
    assert load_benchmark("urban1k", tmp_path, split="test", max_samples=2).dataset["id"] == ["1", "2"]


def test_urban1k_errors(tmp_path):
    (tmp_path / "image").mkdir()
    with pytest.raises(FileNotFoundError, match=r"Urban1k.*directory not found: .*caption"):
        load_benchmark("urban1k", tmp_path)
    (tmp_path / "caption").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no caption files"):
        load_benchmark("urban1k", tmp_path)
    (tmp_path / "caption/1.txt").write_bytes(b"\xff\xfe not UTF-8")
    with pytest.raises(ValueError, match=r"1\.txt: not UTF-8"):
        load_benchmark("urban1k", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# DOCCI
# ---------------------------------------------------------------------------------------------------------------
def docci_entry(example_id: str, split: str, index: int) -> dict:
    return {"example_id": example_id, "split": split, "image_file": f"{example_id}.jpg",
            "description": f"  Image {index} is described here. {LONG} "}


def test_docci_official_release(tmp_path):
    entries = [docci_entry("train_00000", "train", 0), docci_entry("test_00000", "test", 1),
               docci_entry("qual_dev_00000", "qual_dev", 2), docci_entry("test_00001", "test", 3),
               docci_entry("test_00002", "test", 4)]
    write_jsonl(tmp_path / "docci_descriptions.jsonlines", entries)
    for index, entry in enumerate(entries):
        write_image(tmp_path / "images" / entry["image_file"], index)
    write_corrupt(tmp_path / "images/test_00002.jpg")
    bench = load_benchmark("docci", tmp_path)
    assert bench.split == "test" and bench.dataset["id"] == ["test_00000", "test_00001"] and bench.num_skipped == 1
    row = bench.dataset[0]
    assert row["caption"] == f"Image 1 is described here. {LONG}"  # stripped
    assert row["sentences"][0] == "Image 1 is described here."
    assert_color(row["image"], 1)
    train = load_benchmark("docci", tmp_path, split="train")
    assert train.dataset["id"] == ["train_00000"] and train.split == "train"
    assert load_benchmark("docci", tmp_path, split="qual_dev").dataset["id"] == ["qual_dev_00000"]
    empty = load_benchmark("docci", tmp_path, split="qual_test")  # no record of that split: empty, same columns
    assert len(empty) == 0 and empty.fields == {"id", "image", "caption", "sentences"} and empty.num_skipped == 0


def test_docci_himo_test_set_layout_and_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"test_set\.jsonl or .*docci_descriptions\.jsonlines"):
        load_benchmark("docci", tmp_path)
    write_jsonl(tmp_path / "test_set.jsonl", [{"image_file": "test_00007.jpg", "description": "A dog."}])
    with pytest.raises(FileNotFoundError, match=r"DOCCI.*directory not found: .*images"):
        load_benchmark("docci", tmp_path)
    write_image(tmp_path / "images/test_00007.jpg", 7)
    bench = load_benchmark("docci", tmp_path)
    assert bench.dataset["id"] == ["test_00007"] and bench.dataset[0]["caption"] == "A dog."
    assert bench.source.endswith("test_set.jsonl") and available_tasks(bench.dataset) == ("retrieval",)
    with pytest.raises(FileNotFoundError, match="docci_descriptions.jsonlines"):
        load_benchmark("docci", tmp_path, split="train")  # the HiMo file only holds the test split
    (tmp_path / "test_set.jsonl").write_text('{"image_file": "a.jpg", "description": "ok"}\n{"image_file": "b.jpg"}\n')
    with pytest.raises(ValueError, match=r"test_set\.jsonl: malformed record line 2: missing key 'description'"):
        load_benchmark("docci", tmp_path)
    (tmp_path / "test_set.jsonl").write_text('{"image_file": "a.jpg", "description": "ok"}\n{not json\n')
    with pytest.raises(ValueError, match=r"test_set\.jsonl: malformed record line 2: not valid JSON"):
        load_benchmark("docci", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# Long-DCI
# ---------------------------------------------------------------------------------------------------------------
def write_dci_long(path: Path, rows) -> Path:
    """As TULIP's dci_long_part.py: pandas ``to_csv(sep="\\t", index=False)`` (QUOTE_MINIMAL, '"' doubled)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, delimiter="\t", lineterminator="\n")
        writer.writerow(["filepath", "title"])
        writer.writerows(rows)
    return path


TRICKY = 'A sign reads "OPEN"\tin red. Below it,\na second line of text.'


def test_long_dci(tmp_path):
    write_dci_long(tmp_path / "dci_long.csv", [("sa_1.jpg", f"First. {LONG}"), ("sa_2.jpg", TRICKY),
                                               ("sa_3.jpg", "Third."), ("sa_4.jpg", "Corrupt.")])
    write_image(tmp_path / "sa_1.jpg", 1)  # TULIP: images next to the csv
    write_image(tmp_path / "photos/sa_2.jpg", 2)  # DCI release layout
    write_image(tmp_path / "densely_captioned_images/photos/sa_3.jpg", 3)
    write_corrupt(tmp_path / "photos/sa_4.jpg")
    bench = load_benchmark("long_dci", tmp_path)
    assert bench.dataset["id"] == ["sa_1", "sa_2", "sa_3"] and bench.num_skipped == 1
    assert bench.dataset["caption"][1] == TRICKY.strip()  # quoted tab, quotes and newline survive
    for index in range(3):
        assert_color(bench.dataset[index]["image"], index + 1)
    sa1b = load_benchmark("long_dci", tmp_path, image_root="photos")  # HiMo-CLIP: a separate SA-1B root
    assert sa1b.dataset["id"] == ["sa_2"] and sa1b.num_skipped == 3


def test_long_dci_reads_pandas_output(tmp_path):
    pandas = pytest.importorskip("pandas")
    pandas.DataFrame([{"filepath": "sa_9.jpg", "title": TRICKY}]).to_csv(tmp_path / "dci_long.csv", index=False,
                                                                         sep="\t")
    write_image(tmp_path / "sa_9.jpg", 9)
    assert load_benchmark("long_dci", tmp_path).dataset["caption"] == [TRICKY.strip()]


def test_long_dci_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"Long-DCI.*file not found, tried: .*dci_long\.csv"):
        load_benchmark("long_dci", tmp_path)
    (tmp_path / "dci_long.csv").write_text("image,caption\nsa_1.jpg,hello\n")
    with pytest.raises(ValueError, match=r"dci_long\.csv: header .*lacks column\(s\) \['filepath', 'title'\]"):
        load_benchmark("long_dci", tmp_path)
    write_dci_long(tmp_path / "dci_long.csv", [("sa_1.jpg", "fine"), ("sa_2.jpg", "")])
    with pytest.raises(ValueError, match=r"dci_long\.csv: malformed record line 3: 'title'"):
        load_benchmark("long_dci", tmp_path)
    (tmp_path / "dci_long.csv").write_text("filepath\ttitle\nsa_1.jpg\n")
    with pytest.raises(ValueError, match=r"malformed record line 2: expected 2"):
        load_benchmark("long_dci", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# HiMo-Docci
# ---------------------------------------------------------------------------------------------------------------
def test_himo_docci(tmp_path):
    prefixes = ["A street corner.", "A street corner. The word \"ROW\",", "A street corner. The word \"ROW\", faded."]
    write_jsonl(tmp_path / "himo_docci_data.json", [
        {"img_path": "test_00000.jpg", "caption": prefixes, "raw_caption": 'A street corner. The word " ROW", faded.'},
        {"img_path": "test_00001.jpg", "caption": ["One.", "One. Two."]},
        {"img_path": "test_00005.jpg", "caption": ["Bad.", "Bad. Image."], "raw_caption": "Bad. Image."},
    ])
    write_image(tmp_path / "images/test_00000.jpg", 0)
    write_image(tmp_path / "images/test_00001.jpg", 1, fmt="PNG")
    write_corrupt(tmp_path / "images/test_00005.jpg")
    bench = load_benchmark("himo_docci", tmp_path)
    assert bench.dataset["id"] == ["test_00000", "test_00001"] and bench.num_skipped == 1
    first, second = bench.dataset[0], bench.dataset[1]
    assert first["subtexts"] == prefixes and first["caption"] == 'A street corner. The word " ROW", faded.'
    assert first["sentences"] == ["A street corner.", 'The word " ROW", faded.']
    assert second["subtexts"] == ["One.", "One. Two."] and second["caption"] == "One. Two."  # no raw_caption
    assert_color(first["image"], 0)
    assert_color(second["image"], 1)
    assert available_tasks(bench.dataset) == ("retrieval", "himo") and "subtexts" in bench.fields


def test_himo_docci_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"HiMo-Docci.*himo_docci_data\.json"):
        load_benchmark("himo_docci", tmp_path)
    write_jsonl(tmp_path / "himo_docci_data.json", [{"img_path": "a.jpg", "caption": "not a list"}])
    (tmp_path / "images").mkdir()
    with pytest.raises(ValueError, match=r"himo_docci_data\.json: malformed record line 1: 'caption' must be"):
        load_benchmark("himo_docci", tmp_path)
    write_jsonl(tmp_path / "himo_docci_data.json", [{"img_path": "a.jpg", "caption": ["ok", 3]}])
    with pytest.raises(ValueError, match=r"line 1: 'caption\[\]' must be a non-empty string"):
        load_benchmark("himo_docci", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# COCO / Flickr30k Karpathy splits
# ---------------------------------------------------------------------------------------------------------------
def test_coco_karpathy(tmp_path):
    entries = [karpathy_image(0, "test", "val2014"), karpathy_image(1, "train", "train2014"),
               karpathy_image(2, "restval", "val2014"), karpathy_image(3, "val", "val2014"),
               karpathy_image(4, "test", "val2014", count=6), karpathy_image(5, "test", "val2014")]
    write_json(tmp_path / "dataset_coco.json", {"images": entries, "dataset": "coco"})
    for index, entry in enumerate(entries):
        write_image(tmp_path / entry["filepath"] / entry["filename"], index)
    write_corrupt(tmp_path / entries[5]["filepath"] / entries[5]["filename"])
    Image.new("L", (8, 6), 77).save(tmp_path / entries[3]["filepath"] / entries[3]["filename"], "JPEG")  # grayscale
    bench = load_benchmark("coco", tmp_path)
    assert bench.split == "test" and bench.dataset["id"] == ["1000", "1004"] and bench.num_skipped == 1
    row = bench.dataset[0]
    assert row["captions"] == [f"caption {k} of image 0." for k in range(5)]
    assert row["caption"] == "caption 0 of image 0." and row["sentences"] == ["caption 0 of image 0."]
    assert len(bench.dataset[1]["captions"]) == 6
    assert_color(row["image"], 0)
    assert_color(bench.dataset[1]["image"], 4)
    assert available_tasks(bench.dataset) == ("retrieval",)  # one-sentence captions: no HiMo evaluation
    assert load_benchmark("coco", tmp_path, split="train").dataset["id"] == ["1001", "1002"]  # train + restval
    assert load_benchmark("coco", tmp_path, split="restval").dataset["id"] == ["1002"]
    val = load_benchmark("coco", tmp_path, split="val")
    assert val.dataset["id"] == ["1003"]
    assert abs(pixel(val.dataset[0]["image"])[0] - 77) <= 3  # decoded as RGB


def test_flickr30k_karpathy(tmp_path):
    entries = [karpathy_image(0, "test"), karpathy_image(1, "train"), karpathy_image(2, "test")]
    write_json(tmp_path / "dataset_flickr30k.json", {"images": entries, "dataset": "flickr30k"})
    for index, entry in enumerate(entries):
        write_image(tmp_path / "flickr30k-images" / entry["filename"], index)
    bench = load_benchmark("flickr30k", tmp_path)
    assert bench.dataset["id"] == ["0", "2"] and bench.num_skipped == 0
    assert [len(c) for c in bench.dataset["captions"]] == [5, 5]
    assert bench.dataset[1]["caption"] == "caption 0 of image 2."
    assert_color(bench.dataset[1]["image"], 2)


def test_karpathy_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"coco Karpathy split.*dataset_coco\.json"):
        load_benchmark("coco", tmp_path)
    write_json(tmp_path / "dataset_coco.json", {"images": [karpathy_image(0, "test")]})  # no filepath
    with pytest.raises(ValueError, match=r"dataset_coco\.json: malformed record 0: missing key 'filepath'"):
        load_benchmark("coco", tmp_path)
    broken = karpathy_image(1, "test", "val2014")
    broken["sentences"] = [{"tokens": ["a"]}]
    write_json(tmp_path / "dataset_coco.json", {"images": [karpathy_image(0, "test", "val2014"), broken]})
    with pytest.raises(ValueError, match=r"malformed record 1: missing key 'raw'"):
        load_benchmark("coco", tmp_path)
    write_json(tmp_path / "dataset_flickr30k.json", [karpathy_image(0, "test")])
    with pytest.raises(ValueError, match=r"dataset_flickr30k\.json: expected a JSON object with an 'images' list"):
        load_benchmark("flickr30k", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# HierarCaps
# ---------------------------------------------------------------------------------------------------------------
def test_hierarcaps(tmp_path):
    write_hierarcaps(tmp_path / "hierarcaps_test.csv", HIERARCAPS_ROWS)
    write_image(tmp_path / "test_imgs/COCO_val2014_000000301718.jpg", 1)
    write_image(tmp_path / "test_imgs/100489.jpg", 2)  # any '<...>_<id>' or bare-id name maps by COCO id
    write_corrupt(tmp_path / "test_imgs/COCO_val2014_000000000139.jpg")
    bench = load_benchmark("hierarcaps", tmp_path)
    assert bench.dataset["id"] == ["0", "1", "2"] and bench.num_skipped == 1
    row = bench.dataset[1]
    assert row["levels"] == ["bird", "blue bird", "blue bird sitting on top of branch",
                             "A blue bird on a branch. It is autumn."]
    assert row["caption"] == "A blue bird on a branch. It is autumn." and len(row["sentences"]) == 2
    assert bench.dataset["image_id"] == [301718, 100489, 100489]  # rows 1 and 2 share one image
    assert_color(bench.dataset[0]["image"], 1)
    assert_color(bench.dataset[2]["image"], 2)
    assert available_tasks(bench.dataset) == ("retrieval", "himo", "hierarcaps")
    assert bench.skipped_paths == [str(tmp_path / "test_imgs/COCO_val2014_000000000139.jpg")]


def test_hierarcaps_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hierarcaps_test\.csv"):
        load_benchmark("hierarcaps", tmp_path)
    write_hierarcaps(tmp_path / "hierarcaps_test.csv", HIERARCAPS_ROWS[:1])
    with pytest.raises(FileNotFoundError,
                       match=r"HierarCaps.*directory not found, tried: .*test_imgs or .*images or .*assets/test_imgs"):
        load_benchmark("hierarcaps", tmp_path)
    write_image(tmp_path / "images/COCO_val2014_000000301718.jpg", 1)
    assert load_benchmark("hierarcaps", tmp_path).dataset["image_id"] == [301718]  # images/ fallback
    write_hierarcaps(tmp_path / "hierarcaps_test.csv", [("7", "a => b => c", 301718)])
    with pytest.raises(ValueError, match=r"hierarcaps_test\.csv: malformed record line 2: 'captions' must hold 4"):
        load_benchmark("hierarcaps", tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# COLA multi-object
# ---------------------------------------------------------------------------------------------------------------
VG = "https://cs-people.bu.edu/array/data/vg_gqa_images/"


def test_cola_multi(tmp_path):
    write_json(tmp_path / "COLA_multiobjects_matching_benchmark.json", [
        [VG + "2390970.jpg", "tall giraffe to the right of brown giraffe", VG + "2388902.jpg",
         "brown giraffe behind tall white giraffe"],
        [VG + "2388902.jpg", "white shirt to the left of blue pants", "local/713531.png",
         "blue shirt to the left of white pants"],
        [VG + "1925.jpg", "blue car to the right of black car", VG + "2390970.jpg", "black car to the right of blue"],
    ])
    write_image(tmp_path / "images/2390970.jpg", 1)
    write_image(tmp_path / "images/2388902.jpg", 2)
    write_image(tmp_path / "images/local/713531.png", 3, fmt="PNG")
    write_corrupt(tmp_path / "images/1925.jpg")
    bench = load_benchmark("cola_multi", tmp_path)
    assert bench.split == "val" and bench.dataset["id"] == ["0", "1"] and bench.num_skipped == 1
    assert bench.skipped_paths == [str(tmp_path / "images/1925.jpg")]
    first, second = bench.dataset[0], bench.dataset[1]
    assert first["captions"] == ["tall giraffe to the right of brown giraffe",
                                 "brown giraffe behind tall white giraffe"]
    assert len(first["images"]) == 2
    assert_color(first["images"][0], 1)
    assert_color(first["images"][1], 2)
    assert_color(second["images"][0], 2)
    assert_color(second["images"][1], 3)
    assert available_tasks(bench.dataset) == ("cola",) and bench.fields == {"id", "images", "captions"}


def test_cola_multi_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"COLA.*COLA_multiobjects_matching_benchmark\.json"):
        load_benchmark("cola_multi", tmp_path)
    (tmp_path / "images").mkdir()
    write_json(tmp_path / "cleaned_hardcontrastive_val_unique.json", [[VG + "1.jpg", "a", VG + "2.jpg"]])
    with pytest.raises(ValueError, match=r"cleaned_hardcontrastive_val_unique\.json: malformed record 0: expected"):
        load_benchmark("cola_multi", tmp_path)
    write_json(tmp_path / "cleaned_hardcontrastive_val_unique.json", [[VG + "1.jpg", "a", VG + "2.jpg", ""]])
    with pytest.raises(ValueError, match=r"malformed record 0: 'caption_2'"):
        load_benchmark("cola_multi", tmp_path)
