"""Every benchmark loads from its official layout with no file moved: each test writes the tree the official
download or clone leaves (real file and field names, real quirks), loads it by protocol and checks that every image
row carries its own caption (the caption names a scene index, the image has that index's colour)."""

import csv
import json
import logging
import re
from pathlib import Path

import pytest
from PIL import Image

from helpers.benchmark_files import color, karpathy_image, write_hierarcaps, write_image, write_json
from hf_longclip.data.benchmarks import BENCHMARKS, LayoutNotFoundError, describe_protocols, load_benchmark
from hf_longclip.data.eval_datasets import check_data_dir, load_eval_dataset
from hf_longclip.metrics.zero_shot import DEFAULT_TEMPLATES, IMAGENET_TEMPLATES

SCENE = re.compile(r"scene (\d+)")


def scene(index: int, extra: str = "") -> str:
    return f"A photo of scene {index}. It shows {index} objects on a table.{extra}"


def assert_paired(dataset, column: str = "caption") -> None:
    """Each row's image has the colour of the scene its caption(s) name (every caption of the row agrees)."""
    assert len(dataset) > 0
    for row in dataset:
        texts = row[column] if isinstance(row[column], list) else [row[column]]
        indices = {int(match.group(1)) for text in texts for match in [SCENE.search(text)] if match}
        assert len(indices) == 1, (row["id"], texts)
        expected = color(indices.pop())
        pixel = row["image"].getpixel((row["image"].width // 2, row["image"].height // 2))
        assert all(abs(a - b) <= 12 for a, b in zip(pixel, expected)), (row["id"], pixel, expected)


# ---------------------------------------------------------------------------------------------------------------
# Urban1k
# ---------------------------------------------------------------------------------------------------------------
def test_urban1k_release_keeps_the_empty_caption_with_one_warning(tmp_path, caplog):
    root = tmp_path / "Urban1k"
    for index in (1, 10, 592):
        write_image(root / f"image/{index}.jpg", index)
        (root / "caption").mkdir(exist_ok=True)
        (root / f"caption/{index}.txt").write_text(f"{scene(index)}\n", encoding="utf-8")
    (root / "caption/592.txt").write_text("\nA second line the official code never reads.\n")  # the release's quirk
    with caplog.at_level(logging.WARNING, logger="hf_longclip.data.benchmarks"):
        bench = load_benchmark("urban1k", root)
    assert bench.protocol == "longclip" and bench.num_skipped == 0 and len(bench) == 3  # nothing dropped
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "592.txt" in warnings[0] and "empty" in warnings[0]
    empty = bench.dataset.filter(lambda row: row["id"] == "592")[0]
    assert empty["caption"] == "" and empty["sentences"] == []
    assert_color(empty["image"], 592)
    assert_paired(bench.dataset.filter(lambda row: row["id"] != "592"))


def test_urban1k_flair_annotations(tmp_path, caplog):
    root = tmp_path / "Urban1k"
    entries = [{"image_id": 0, "image": "1.jpg", "caption": scene(1)}, {"image_id": 1, "image": "10.jpg",
                                                                          "caption": scene(10)},
               {"image_id": 548, "image": "592.jpg", "caption": ""}]  # as in FLAIR's file
    write_json(root / "annotations/annotations.json", {"annotations": entries})
    for index in (1, 10, 592):
        write_image(root / f"images/{index}.jpg", index)
    with caplog.at_level(logging.WARNING, logger="hf_longclip.data.benchmarks"):
        bench = load_benchmark("urban1k", root, protocol="flair")
    assert bench.dataset["id"] == ["0", "1", "548"] and bench.dataset["caption"][2] == ""
    assert "592.jpg" in caplog.text
    assert_paired(bench.dataset.select([0, 1]))
    assert_color(bench.dataset[2]["image"], 592)


# ---------------------------------------------------------------------------------------------------------------
# HierarCaps and CxC as cloned
# ---------------------------------------------------------------------------------------------------------------
def test_hierarcaps_as_cloned(tmp_path):
    clone = tmp_path / "hierarcaps"
    (clone / "data").mkdir(parents=True)
    rows = [("0", f"table => table with plates => plates => {scene(3)}", 301718),
            ("1", f"bird => blue bird => bird on a branch => {scene(5)}", 100489)]
    write_hierarcaps(clone / "data/hierarcaps_test.csv", rows)
    write_image(clone / "assets/test_imgs/COCO_val2014_000000301718.jpg", 3)
    write_image(clone / "assets/test_imgs/COCO_val2014_000000100489.jpg", 5)
    (clone / "code").mkdir()  # the rest of the clone is ignored
    bench = load_benchmark("hierarcaps", clone)
    assert bench.dataset["image_id"] == [301718, 100489] and bench.source.endswith("data/hierarcaps_test.csv")
    assert_paired(bench.dataset)


def write_csv(path: Path, header, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([header, *rows])


def write_cxc_clone(folder: Path, coco_id: int, sentid: int) -> None:
    name = f"COCO_val2014_{coco_id:012d}.jpg"
    write_csv(folder / "data/sits_test.csv", ["caption", "image", "agg_score", "sampling_method"],
              [[f"COCO_val2014:sentid:{sentid}", name, 4.0, "c2i_original"]])
    write_csv(folder / "data/sts_test.csv", ["caption1", "caption2", "agg_score", "sampling_method"], [])
    write_csv(folder / "data/sis_test.csv", ["image1", "image2", "agg_score", "sampling_method"], [])
    (folder / "README.md").write_text("Crisscrossed Captions\n")


@pytest.mark.parametrize("clone_name", ["Crisscrossed-Captions", "cxc"])
def test_cxc_as_cloned(tmp_path, clone_name):
    entries = [karpathy_image(index, "test", "val2014") for index in (1, 2)]
    for entry in entries:
        entry["sentences"] = [{**sentence, "raw": scene(entry["imgid"], f" Caption {k}.")}
                              for k, sentence in enumerate(entry["sentences"])]
        write_image(tmp_path / "val2014" / entry["filename"], entry["imgid"])
    write_json(tmp_path / "dataset_coco.json", {"images": entries})
    write_cxc_clone(tmp_path / clone_name, entries[0]["cocoid"], 1)
    bench = load_benchmark("coco_cxc", tmp_path)
    assert bench.dataset["image_id"] == [1001, 1002]
    assert bench.dataset["cxc_texts"] == [[], []]  # sentid 1 is an own caption of image 1001 (Karpathy ids 0..4)
    assert_paired(bench.dataset, "captions")


def test_cxc_missing_shows_every_folder_tried(tmp_path):
    write_json(tmp_path / "dataset_coco.json", {"images": [karpathy_image(1, "test", "val2014")]})
    (tmp_path / "cxc/data").mkdir(parents=True)  # an empty clone: the csvs are looked for, not just the folders
    with pytest.raises(LayoutNotFoundError) as error:
        load_benchmark("coco_cxc", tmp_path)
    message = str(error.value)
    for tried in ("Crisscrossed-Captions/data/sits_test.csv", "cxc/data/sits_test.csv", "cxc/sits_test.csv"):
        assert str(tmp_path / tried) in message
    assert "expected layout of coco_cxc" in message and "Crisscrossed-Captions/" in error.value.layout


# ---------------------------------------------------------------------------------------------------------------
# COCO 2017 val (Long-CLIP / HiMo-CLIP / TULIP, FLAIR) beside the Karpathy split
# ---------------------------------------------------------------------------------------------------------------
def write_coco_val2017(root: Path, images_dir: str) -> None:
    """captions_val2017.json in the official format: images out of id order, annotations interleaved; image 139 has
    6 captions (the file has such images), 285 has 5."""
    captions = {139: 6, 285: 5, 632: 5}
    images = [{"license": 4, "file_name": f"{image_id:012d}.jpg", "height": 6, "width": 8, "id": image_id,
               "coco_url": f"http://images.cocodataset.org/val2017/{image_id:012d}.jpg"}
              for image_id in (632, 139, 285)]
    annotations, next_id = [], 38
    for k in range(6):
        for image_id, count in captions.items():
            if k < count:
                annotations.append({"image_id": image_id, "id": next_id, "caption": scene(image_id, f" Take {k}.")})
                next_id += 1
    write_json(root / "annotations/captions_val2017.json", {"info": {}, "licenses": [], "images": images,
                                                            "annotations": annotations})
    for image_id in captions:
        write_image(root / images_dir / f"{image_id:012d}.jpg", image_id)


def test_coco_val2017_longclip_protocol(tmp_path):
    write_coco_val2017(tmp_path, "val2017")
    bench = load_benchmark("coco", tmp_path, protocol="longclip")
    assert bench.split == "val2017" and bench.dataset["id"] == ["139", "285", "632"]  # CocoCaptions: sorted ids
    assert [len(captions) for captions in bench.dataset["captions"]] == [5, 5, 5]  # captions[0:5]
    assert bench.dataset["captions"][0][-1].endswith("Take 4.")  # file order
    assert_paired(bench.dataset, "captions")


def test_coco_val2017_flair_protocol_keeps_every_caption(tmp_path):
    write_coco_val2017(tmp_path, "images/val2017")
    bench = load_benchmark("coco", tmp_path, protocol="flair")
    assert [len(captions) for captions in bench.dataset["captions"]] == [6, 5, 5]
    assert_paired(bench.dataset, "captions")
    with pytest.raises(LayoutNotFoundError, match=r"val2017") as error:
        load_benchmark("coco", tmp_path, protocol="longclip")  # the FLAIR tree is not Long-CLIP's
    assert "other protocols: karpathy, flair" in str(error.value)


def test_coco_karpathy_stays_the_default(tmp_path):
    write_coco_val2017(tmp_path, "val2017")
    with pytest.raises(LayoutNotFoundError, match=r"dataset_coco\.json") as error:
        load_benchmark("coco", tmp_path)
    assert "protocol karpathy" in str(error.value) and "longclip" in str(error.value)


# ---------------------------------------------------------------------------------------------------------------
# Flickr30k token file (Long-CLIP / HiMo-CLIP) and FLAIR's json
# ---------------------------------------------------------------------------------------------------------------
def token_lines(indices, per_image: int = 5) -> str:
    return "".join(f"{1000092795 + index}.jpg#{k}\t{scene(index, f' Take {k}.')}\n"
                   for index in indices for k in range(per_image))


@pytest.mark.parametrize("token_file", ["test_1k.txt", "results_20130124.token"])
def test_flickr30k_token_file(tmp_path, token_file):
    (tmp_path / token_file).write_text(token_lines([4, 7, 9]), encoding="utf-8")
    for index in (4, 7, 9):
        write_image(tmp_path / f"flickr30k-images/{1000092795 + index}.jpg", index)
    bench = load_benchmark("flickr30k", tmp_path, protocol="longclip")
    assert bench.dataset["id"] == ["1000092799", "1000092802", "1000092804"] and bench.source.endswith(token_file)
    assert all(len(captions) == 5 for captions in bench.dataset["captions"])
    assert bench.dataset["captions"][1][3] == scene(7, " Take 3.")  # no '#3', no trailing newline
    assert_paired(bench.dataset, "captions")


def test_flickr30k_token_file_errors(tmp_path):
    (tmp_path / "flickr30k-images").mkdir()
    (tmp_path / "test_1k.txt").write_text(token_lines([1], per_image=4))
    with pytest.raises(ValueError, match=r"4 caption lines, expected 5"):
        load_benchmark("flickr30k", tmp_path, protocol="longclip")
    (tmp_path / "test_1k.txt").write_text(token_lines([1]) + token_lines([2]) + token_lines([1]))
    with pytest.raises(ValueError, match=r"line 11: the captions of 1000092796\.jpg are not consecutive"):
        load_benchmark("flickr30k", tmp_path, protocol="longclip")
    (tmp_path / "test_1k.txt").write_text(token_lines([1]) + "1000092797.jpg a caption without tab or index\n")
    with pytest.raises(ValueError, match=r"line 6: expected '<image>#<n><TAB><caption>'"):
        load_benchmark("flickr30k", tmp_path, protocol="longclip")


def test_flickr30k_flair_json(tmp_path):
    folder = tmp_path / "flickr30k-images"
    entries = [{"image": f"flickr30k-images/{100 + index}.jpg", "caption": [scene(index, f" Take {k}.")
                                                                            for k in range(5)]} for index in (2, 3)]
    write_json(folder / "flickr30k_test.json", entries)
    write_json(folder / "flickr30k_val.json", entries[:1])
    for index in (2, 3):
        write_image(folder / f"{100 + index}.jpg", index)
    bench = load_benchmark("flickr30k", folder, split="test", protocol="flair")
    assert bench.dataset["id"] == ["102", "103"] and bench.split == "test"
    assert_paired(bench.dataset, "captions")
    val = load_benchmark("flickr30k", folder, protocol="flair")  # FLAIR's default: the val file it ships
    assert val.split == "val" and val.dataset["id"] == ["102"]


@pytest.mark.parametrize("images_dir", ["flickr30k_images/flickr30k_images", "flickr30k_images"])
def test_flickr30k_kaggle_release_keeps_the_line_without_comment(tmp_path, images_dir, caplog):
    lines = ["image_name| comment_number| comment"]
    for index in (3, 8):
        lines += [f"{1000 + index}.jpg| {k}| {scene(index, f' Take {k}.')}" for k in range(5)]
    lines[7] = f"1008.jpg| 1 {scene(8)}"  # the release's quirk: number and comment not separated
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for index in (3, 8):
        write_image(tmp_path / images_dir / f"{1000 + index}.jpg", index)
    with caplog.at_level(logging.WARNING, logger="hf_longclip.data.benchmarks"):
        bench = load_benchmark("flickr30k", tmp_path, protocol="tulip")
    assert bench.split == "all" and bench.dataset["id"] == ["1003", "1008"]
    assert bench.dataset["captions"][1][1] == "" and "line 8" in caplog.text  # kept, as TULIP's " "
    assert bench.dataset["captions"][0][0] == scene(3, " Take 0.")
    assert_paired(bench.dataset.map(lambda row: {"captions": [c for c in row["captions"] if c]}), "captions")


# ---------------------------------------------------------------------------------------------------------------
# DOCCI (FLAIR) and Long-DCI (TULIP's csv, FLAIR's reading of the DCI release)
# ---------------------------------------------------------------------------------------------------------------
def test_docci_flair_fine_grained_captions(tmp_path):
    entries = [{"image_id": image_id, "image": f"test_{index:05d}.jpg", "caption": scene(index, f" Part {k}.")}
               for image_id, index in ((0, 11), (1, 12)) for k in range(3)]
    entries.append({"image_id": 0, "image": "test_00011.jpg", "caption": scene(11, " Late part.")})
    write_json(tmp_path / "annotations/test_annotations.json", {"annotations": entries})
    for index in (11, 12):
        write_image(tmp_path / f"images/test_{index:05d}.jpg", index)
    bench = load_benchmark("docci", tmp_path, protocol="flair")
    assert bench.dataset["id"] == ["0", "1"] and [len(c) for c in bench.dataset["captions"]] == [4, 3]
    assert_paired(bench.dataset, "captions")


def test_long_dci_tulip_csv_with_quoted_newlines(tmp_path):
    rows = [("sa_1.jpg", scene(1, ' A sign reads "OPEN"\tin red.\nA second line.')), ("sa_2.jpg", scene(2))]
    with (tmp_path / "dci_long.csv").open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, delimiter="\t", lineterminator="\n")  # pandas' to_csv(sep="\t") quoting
        writer.writerows([("filepath", "title"), *rows])
    text = (tmp_path / "dci_long.csv").read_text()
    assert '"' in text and len(text.splitlines()) == 4  # quoted: 3 records on 4 lines
    for index in (1, 2):
        write_image(tmp_path / f"sa_{index}.jpg", index)
    bench = load_benchmark("long_dci", tmp_path)
    assert bench.protocol == "tulip" and "\n" in bench.dataset["caption"][0]
    assert_paired(bench.dataset)


def test_long_dci_himo_layout_images_in_a_sibling_sa1b_folder(tmp_path):
    dci = tmp_path / "data/dci"  # HiMo-CLIP: data/dci/dci_long.csv, images in data/SA1B/
    dci.mkdir(parents=True)
    (dci / "dci_long.csv").write_text(f"filepath\ttitle\nsa_5.jpg\t{scene(5)}\nsa_6.jpg\t{scene(6)}\n")
    for index in (5, 6):
        write_image(tmp_path / f"data/SA1B/sa_{index}.jpg", index)
    bench = load_benchmark("long_dci", dci)
    assert bench.num_skipped == 0 and bench.dataset["id"] == ["sa_5", "sa_6"]
    assert_paired(bench.dataset)


def test_long_dci_flair_reads_the_dci_release(tmp_path):
    release = tmp_path / "densely_captioned_images"
    write_json(release / "splits.json", {"train": ["1-data.json"], "valid": [], "test": ["2-data.json"]})
    for index in (1, 2):
        write_json(release / f"annotations/{index}-data.json", {
            "image": f"sa_{index}.jpg", "short_caption": f"A photo of scene {index}",
            "extra_caption": f"It shows {index} objects.\nThe table is wood</s>", "mask_data": {}})
        write_image(release / f"photos/sa_{index}.jpg", index)
    bench = load_benchmark("long_dci", tmp_path, protocol="flair")
    assert bench.dataset["caption"][0] == "A photo of scene 1. It shows 1 objects. The table is wood"
    assert_paired(bench.dataset)


# ---------------------------------------------------------------------------------------------------------------
# Image folders: zero-shot classification
# ---------------------------------------------------------------------------------------------------------------
def write_image_folder(root: Path) -> None:
    for label, (folder, count) in enumerate([("n01440764", 2), ("n01443537", 1), ("n01484850", 2)]):
        for k in range(count):
            write_image(root / folder / f"ILSVRC2012_val_{label}{k:07d}.JPEG", label)
    (root / "n01440764" / "README.txt").write_text("not an image")


@pytest.mark.parametrize("names_file", [None, "mapping", "ordered"])
def test_image_folder_class_names(tmp_path, names_file):
    write_image_folder(tmp_path)
    expected = ["n01440764", "n01443537", "n01484850"]
    if names_file == "mapping":  # ImageNet's LOC_synset_mapping.txt style
        (tmp_path / "classnames.txt").write_text("n01484850 great white shark\nn01440764 tench\n"
                                                 "n01443537 goldfish\n")
        expected = ["tench", "goldfish", "great white shark"]
    elif names_file == "ordered":  # CLIP's class names, one per line in folder order
        (tmp_path / "classnames.txt").write_text("tench\ngoldfish\ngreat white shark\n")
        expected = ["tench", "goldfish", "great white shark"]
    bench = load_benchmark("imagefolder", tmp_path)
    assert bench.dataset.features["label"].names == expected and bench.templates == IMAGENET_TEMPLATES
    assert bench.dataset["label"] == [0, 0, 1, 2, 2] and bench.dataset["id"][2].startswith("n01443537/")
    for row in bench.dataset:
        assert_color(row["image"], row["label"])
    dataset, split, _, classnames, templates = load_eval_dataset("imagefolder", str(tmp_path), protocol="simple")
    assert split == "val" and classnames is None and templates == DEFAULT_TEMPLATES


def test_image_folder_errors(tmp_path):
    write_image_folder(tmp_path)
    (tmp_path / "classnames.txt").write_text("tench\ngoldfish\n")
    with pytest.raises(ValueError, match=r"2 class names for 3 class folders"):
        load_benchmark("imagefolder", tmp_path)
    with pytest.raises(LayoutNotFoundError, match=r"no class folders") as error:
        load_benchmark("imagefolder", tmp_path / "n01443537")
    assert "<class folder>/<image>.JPEG" in error.value.layout


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from helpers.builders import tiny_himo, tiny_processor

    path = tmp_path_factory.mktemp("ckpt")
    tiny_himo().save_pretrained(path)
    tiny_processor().save_pretrained(path)
    return path


def test_cli_runs_zero_shot_on_an_image_folder(checkpoint, tmp_path):
    from hf_longclip.cli import main as cli_main

    write_image_folder(tmp_path / "val")
    cli_main(["eval", "--model", str(checkpoint), "--dataset", "imagefolder", "--data-dir", str(tmp_path / "val"),
              "--protocol", "simple", "--device", "cpu", "--output-dir", str(tmp_path / "eval")])
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["protocol"] == "simple" and report["num_samples"] == 5
    assert set(report["metrics"]) == {"zero_shot"}
    assert 0 <= report["metrics"]["zero_shot"]["top1"] <= 100


# ---------------------------------------------------------------------------------------------------------------
# Protocols: names, help, errors
# ---------------------------------------------------------------------------------------------------------------
def test_protocol_names_and_help():
    assert list(BENCHMARKS["coco"].protocols) == ["karpathy", "longclip", "flair"]
    assert list(BENCHMARKS["flickr30k"].protocols) == ["karpathy", "longclip", "flair", "tulip"]
    assert list(BENCHMARKS["urban1k"].protocols) == ["longclip", "flair"]
    assert all(spec.protocols for spec in BENCHMARKS.values())
    lines = list(describe_protocols())
    assert "coco --protocol longclip: " in "\n".join(lines) and any("annotations/captions_val2017.json" in line
                                                                    for line in lines)
    with pytest.raises(ValueError, match=r"coco: unknown protocol 'clip'; expected one of karpathy, longclip, flair"):
        load_benchmark("coco", ".", protocol="clip")
    assert check_data_dir("coco", "x", None) == "karpathy" and check_data_dir("coco", "x", "flair") == "flair"
    with pytest.raises(ValueError, match="no protocols"):
        check_data_dir("synthetic", None, "longclip")


def test_cli_error_shows_the_expected_tree(checkpoint, tmp_path, capsys):
    from hf_longclip.cli import main as cli_main

    (tmp_path / "coco/val2017").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["eval", "--model", str(checkpoint), "--dataset", "coco", "--data-dir", str(tmp_path / "coco"),
                  "--protocol", "longclip", "--device", "cpu", "--output-dir", str(tmp_path / "eval")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    tried = tmp_path / "coco/annotations/captions_val2017.json"
    assert f"file not found, tried: {tried}\nexpected layout of coco, protocol longclip" in err
    assert "\n  coco/ " in err and "\n    annotations/captions_val2017.json\n" in err  # the tree, indented as is
    with pytest.raises(SystemExit):
        cli_main(["eval", "--model", str(checkpoint), "--dataset", "coco", "--data-dir", str(tmp_path),
                  "--protocol", "nope"])
    assert "coco: unknown protocol 'nope'; expected one of karpathy, longclip, flair" in capsys.readouterr().err


def assert_color(image, index: int):
    pixel = image.getpixel((image.width // 2, image.height // 2))
    assert isinstance(image, Image.Image) and all(abs(a - b) <= 12 for a, b in zip(pixel, color(index)))


@pytest.mark.parametrize("name,protocol", [(name, protocol) for name, spec in sorted(BENCHMARKS.items())
                                           for protocol in spec.protocols])
def test_every_protocol_names_its_tree_when_files_are_missing(tmp_path, name, protocol):
    (tmp_path / "data").mkdir()
    with pytest.raises(LayoutNotFoundError) as error:
        load_benchmark(name, tmp_path / "data", protocol=protocol)
    assert str(tmp_path / "data") in error.value.problem  # the path it tried
    assert f"expected layout of {name}, protocol {protocol}" in error.value.layout
    assert BENCHMARKS[name].protocols[protocol].layout.splitlines()[0] in error.value.layout
