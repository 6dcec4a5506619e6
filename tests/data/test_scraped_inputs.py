"""Every image a scrape can hold, and every caption, handled or counted (issue "Real inputs and real clients", items
1 and 2), through each loader that reads files: `hf-longclip shard` (a CSV, an image folder), the shards streamed to
training, the image-folder benchmark of `hf-longclip eval` (and its report.json), and the demo's folder index. Tiny
files in the real formats are written here: a JPEG with an EXIF orientation tag, animated GIF and WebP, a truncated
JPEG and PNG, a zero-byte file, a text file named .jpg, a missing file (a path, a broken link), a decompression bomb
(a PNG header of 20000 x 20000 pixels), and CSVs with empty captions, control characters and non-UTF-8 bytes."""

import io
import json
import os
import struct
import zlib

import numpy as np
import PIL.Image
import pytest
from PIL import Image, ImageOps

from helpers.builders import tiny_himo, tiny_processor
from hf_longclip.cli import main as cli_main
from hf_longclip.data.eval_datasets import load_eval_benchmark
from hf_longclip.data.image_files import MAX_PIXELS_ENV, POLICY_ENV, UnreadableImage, open_image
from hf_longclip.data.shards import MANIFEST, ShardStream
from hf_longclip.demo.index import build_index, read_image

READABLE = ("good.png", "rotated.jpg", "animated.gif", "animated.webp")
UNREADABLE = {"truncated.jpg": "truncated", "truncated.png": "truncated", "empty.jpg": "empty file",
              "text.jpg": "not an image", "bomb.png": "too large"}
MISSING = {"missing.jpg": "missing file"}  # a broken link in a folder; a path to nothing in a CSV


@pytest.fixture(autouse=True)
def default_policy(monkeypatch):
    """Each test starts from the defaults; what the commands set (--bad-samples, --max-image-pixels: environment
    variables, and Pillow's own limit) is undone after it."""
    for name in (POLICY_ENV, MAX_PIXELS_ENV):
        monkeypatch.setenv(name, "")  # recorded, so that what a command sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", PIL.Image.MAX_IMAGE_PIXELS)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int = 20000, height: int = 20000) -> bytes:
    """A 60-byte PNG whose header claims width x height 1-bit pixels: decoded it would take gigabytes."""
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"\0" * 16))
            + _chunk(b"IEND", b""))


def write_cases(folder, missing_link: bool = True):
    """Every case of READABLE and UNREADABLE in `folder` (and MISSING as a broken link)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(folder / "good.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to show it: stored 16 x 8, shown 8 x 16
    Image.fromarray(rng.integers(0, 256, (8, 16, 3), dtype=np.uint8)).save(folder / "rotated.jpg", exif=exif.tobytes())
    frames = [Image.new("RGB", (8, 8), colour) for colour in ("red", "blue")]
    for name in ("animated.gif", "animated.webp"):
        frames[0].save(folder / name, save_all=True, append_images=frames[1:], duration=40, loop=0)
    for name, image_format in (("truncated.jpg", "JPEG"), ("truncated.png", "PNG")):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buffer, format=image_format)
        (folder / name).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])  # a download cut short
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "text.jpg").write_text("<html>404 not found</html>\n")
    (folder / "bomb.png").write_bytes(bomb_png())
    if missing_link:
        os.symlink(folder / "nowhere" / "gone.jpg", folder / "missing.jpg")


def check_readable(image_of) -> None:
    """The readable cases as a viewer shows them: the EXIF rotation applied, an animation's first frame."""
    assert image_of("rotated.jpg").size == (8, 16)
    assert image_of("animated.gif").getpixel((4, 4)) == (255, 0, 0)
    red, green, blue = image_of("animated.webp").getpixel((4, 4))
    assert red > 200 and green < 60 and blue < 60  # red (lossy), not the blue second frame
    assert image_of("good.png").size == (12, 10)


def test_open_image_reads_or_names_each_case(tmp_path):
    write_cases(tmp_path)
    check_readable(lambda name: open_image(tmp_path / name))
    stored = ImageOps.exif_transpose(Image.open(tmp_path / "rotated.jpg")).convert("RGB")
    assert np.array_equal(np.asarray(open_image(tmp_path / "rotated.jpg")), np.asarray(stored))
    for name, reason in {**UNREADABLE, **MISSING}.items():
        with pytest.raises(UnreadableImage) as caught:
            open_image(tmp_path / name)
        assert caught.value.reason == reason and name in str(caught.value), name
        if (tmp_path / name).exists():  # the same reason from the file's bytes
            with pytest.raises(UnreadableImage, match=reason):
                open_image((tmp_path / name).read_bytes())
    header_cut = (tmp_path / "good.png").read_bytes()[:20]  # PIL: "Truncated File Read" while opening, not decoding
    with pytest.raises(UnreadableImage, match="truncated"):
        open_image(header_cut)


def test_the_pixel_limit_is_configurable(tmp_path, monkeypatch):
    write_cases(tmp_path, missing_link=False)
    monkeypatch.setenv(MAX_PIXELS_ENV, "100")  # good.png has 120 pixels
    with pytest.raises(UnreadableImage, match=r"too large \(12 x 10 = 120 pixels, over the limit of 100"):
        open_image(tmp_path / "good.png")
    monkeypatch.setenv(MAX_PIXELS_ENV, "120")
    assert open_image(tmp_path / "good.png").size == (12, 10)


CSV_ROWS = [  # (image, caption as written in the CSV, what happens to the row)
    ("good.png", "a good image", "kept"),
    ("rotated.jpg", "rotated by its EXIF tag", "kept"),
    ("animated.gif", "an animated GIF", "kept"),
    ("animated.webp", "an animated WebP", "kept"),
    ("truncated.jpg", "a JPEG cut short", "truncated"),
    ("truncated.png", "a PNG cut short", "truncated"),
    ("empty.jpg", "zero bytes", "empty file"),
    ("text.jpg", "a web page named .jpg", "not an image"),
    ("gone/missing.jpg", "a file that is not there", "missing file"),
    ("bomb.png", "a decompression bomb", "too large"),
    ("good.png", "", "no caption"),  # an empty CSV field
    ("good.png", '"   "', "empty caption"),
    ("good.png", "a bell\x07 and an escape\x1b in a caption", "kept"),  # cleaned
]


def write_csv(folder) -> None:
    write_cases(folder, missing_link=False)
    (folder / "pairs.csv").write_text("image,caption\n" + "".join(f"{image},{caption}\n"
                                                                 for image, caption, _ in CSV_ROWS))


def test_shard_command_skips_and_counts_every_bad_sample_of_a_csv(tmp_path, capsys):
    write_csv(tmp_path / "data")
    cli_main(["shard", str(tmp_path / "data" / "pairs.csv"), str(tmp_path / "shards")])
    out = capsys.readouterr().out
    assert "5 samples in" in out and "8 sample(s) skipped" in out and "1 caption(s) cleaned" in out
    manifest = json.loads((tmp_path / "shards" / MANIFEST).read_text())
    expected = {}
    for _, _, outcome in CSV_ROWS:
        if outcome != "kept":
            expected[outcome] = expected.get(outcome, 0) + 1
    assert manifest["skipped"]["by_reason"] == expected and manifest["skipped"]["count"] == 8
    assert manifest["num_samples"] == 5 and manifest["num_rows"] == 13 and manifest["captions_cleaned"] == 1
    assert manifest["shards"][0]["samples"] == 5 and manifest["bad_samples"] == "skip"
    named = {example["id"]: example for example in manifest["skipped"]["examples"]}
    assert named["pairs.csv line 6"]["reason"] == "truncated"  # the file's line (the header is line 1)
    assert named["pairs.csv line 6"]["file"].endswith("truncated.jpg")
    # what training streams: the written samples, decoded as a viewer shows them
    rows = {row["caption"]: row for row in ShardStream([str(tmp_path / "shards" / "00000.tar")], buffer_size=0)}
    assert sorted(rows) == sorted(["a good image", "rotated by its EXIF tag", "an animated GIF", "an animated WebP",
                                   "a bell  and an escape  in a caption"])
    by_file = {"good.png": "a good image", "rotated.jpg": "rotated by its EXIF tag",
               "animated.gif": "an animated GIF", "animated.webp": "an animated WebP"}
    check_readable(lambda name: rows[by_file[name]]["image"])


def test_the_error_policy_stops_naming_the_file_and_the_sample(tmp_path, capsys):
    write_csv(tmp_path / "data")
    with pytest.raises(SystemExit):
        cli_main(["shard", str(tmp_path / "data" / "pairs.csv"), str(tmp_path / "shards"), "--bad-samples", "error"])
    error = capsys.readouterr().err
    assert "truncated.jpg: sample pairs.csv line 6: truncated" in error and "--bad-samples skip" in error
    assert not list((tmp_path / "shards").glob("*.tar"))


def test_the_shard_command_raises_the_pixel_limit_on_request(tmp_path, monkeypatch, capsys):
    write_cases(tmp_path / "data", missing_link=False)
    (tmp_path / "data" / "one.csv").write_text("image,caption\ngood.png,a good image\n")
    monkeypatch.setenv(MAX_PIXELS_ENV, "100")
    cli_main(["shard", str(tmp_path / "data" / "one.csv"), str(tmp_path / "low")])
    assert json.loads((tmp_path / "low" / MANIFEST).read_text())["skipped"]["by_reason"] == {"too large": 1}
    cli_main(["shard", str(tmp_path / "data" / "one.csv"), str(tmp_path / "raised"), "--max-image-pixels", "1000"])
    manifest = json.loads((tmp_path / "raised" / MANIFEST).read_text())
    assert manifest["num_samples"] == 1 and manifest["max_image_pixels"] == 1000
    assert "1 samples in" in capsys.readouterr().out


def test_shard_command_on_an_image_folder(tmp_path, capsys):
    folder = tmp_path / "folder"
    write_cases(folder, missing_link=False)
    names = [*READABLE, *UNREADABLE, "gone.jpg"]  # gone.jpg: listed in metadata.csv, not in the folder
    (folder / "metadata.csv").write_text("file_name,caption\n" + "".join(f"{name},caption of {name}\n"
                                                                        for name in names))
    cli_main(["shard", str(folder), str(tmp_path / "shards")])
    manifest = json.loads((tmp_path / "shards" / MANIFEST).read_text())
    assert manifest["num_samples"] == 4 and manifest["skipped"]["by_reason"] == {
        "truncated": 2, "empty file": 1, "not an image": 1, "too large": 1, "missing file": 1}
    assert {example["id"] for example in manifest["skipped"]["examples"]} == {*UNREADABLE, "gone.jpg"}
    rows = {row["caption"]: row for row in ShardStream([str(tmp_path / "shards" / "00000.tar")], buffer_size=0)}
    check_readable(lambda name: rows[f"caption of {name}"]["image"])
    assert "4 samples in" in capsys.readouterr().out


@pytest.mark.parametrize("source", ["pairs.csv", "pairs.jsonl", "folder"])
def test_captions_files_that_are_not_utf8_are_named_with_the_line(tmp_path, source, capsys):
    write_cases(tmp_path, missing_link=False)
    if source == "pairs.csv":
        (tmp_path / source).write_bytes(b"image,caption\ngood.png,fine\ngood.png,caf\xe9 au lait\n")
        where = "pairs.csv: line 3, column 13"
    elif source == "pairs.jsonl":
        (tmp_path / source).write_bytes(b'{"image": "good.png", "caption": "na\xefve"}\n')
        where = "pairs.jsonl: line 1, column 37"
    else:
        (tmp_path / "folder").mkdir()
        Image.new("RGB", (4, 4)).save(tmp_path / "folder" / "a.png")
        (tmp_path / "folder" / "metadata.csv").write_bytes(b"file_name,caption\na.png,\x93quoted\x94\n")
        where = "metadata.csv: line 2, column 7"
    with pytest.raises(SystemExit):
        cli_main(["shard", str(tmp_path / source), str(tmp_path / "shards")])
    error = capsys.readouterr().err
    assert where in error and "is not UTF-8" in error, error


def image_folder_benchmark(root):
    """An image-classification folder: every case in class 'cases' (and a broken link), one image in a class whose
    name is longer than the model's 248 text positions."""
    write_cases(root / "cases")
    long_class = root / ("long_" + "x" * 245)
    long_class.mkdir()
    Image.new("RGB", (8, 8), "green").save(long_class / "one.png")


def test_the_image_folder_benchmark_counts_each_unreadable_file_by_reason(tmp_path):
    image_folder_benchmark(tmp_path)
    benchmark = load_eval_benchmark("imagefolder", str(tmp_path))
    assert benchmark.num_skipped == 6
    assert benchmark.skipped["by_reason"] == {"truncated": 2, "empty file": 1, "not an image": 1, "too large": 1,
                                              "missing file": 1}
    ids = benchmark.dataset["id"]
    assert sorted(ids) == sorted([f"cases/{name}" for name in READABLE] + [f"long_{'x' * 245}/one.png"])
    check_readable(lambda name: benchmark.dataset[ids.index(f"cases/{name}")]["image"])


def test_eval_command_reports_skipped_images_and_cut_captions_in_its_json(tmp_path, capsys):
    image_folder_benchmark(tmp_path / "data")
    checkpoint = tmp_path / "himo"
    tiny_himo(seed=1).save_pretrained(checkpoint)
    tiny_processor().save_pretrained(checkpoint)
    arguments = ["eval", "--model", str(checkpoint), "--dataset", "imagefolder", "--data-dir", str(tmp_path / "data"),
                 "--protocol", "simple", "--output-dir", str(tmp_path / "report"), "--device", "cpu"]
    cli_main(arguments)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["num_samples"] == 5 and report["num_skipped_images"] == 6
    assert report["skipped_images"]["by_reason"]["truncated"] == 2 and report["skipped_images"]["count"] == 6
    truncation = report["caption_truncation"]  # 'a photo of a long xxx...x.': one prompt past 248 tokens
    assert truncation["texts"] == 2 and truncation["truncated"] == 1 and truncation["max_length"] == 248
    assert truncation["tokens_cut"] == truncation["max_tokens_cut"] > 0
    out = capsys.readouterr().out
    assert "truncated 2" in out and "1 of 2 texts cut at 248 tokens" in out
    with pytest.raises(SystemExit):
        cli_main([*arguments, "--bad-samples", "error"])
    assert "bomb.png: record cases/bomb.png of imagefolder: too large" in capsys.readouterr().err


def test_the_demo_index_skips_and_names_each_unreadable_file(tmp_path, monkeypatch):
    write_cases(tmp_path / "images")
    model, processor = tiny_himo(), tiny_processor()
    index = build_index(model, processor, tmp_path / "images", tmp_path / "cache", progress=False)
    assert sorted(path.name for path in index.paths) == sorted(READABLE)
    assert index.skip_reasons == {**UNREADABLE, **MISSING} and sorted(index.skipped) == sorted(index.skip_reasons)
    again = build_index(model, processor, tmp_path / "images", tmp_path / "cache", progress=False)
    assert again.encoded == 0 and again.skip_reasons == index.skip_reasons  # reasons kept in the cache
    check_readable(lambda name: read_image(tmp_path / "images" / name))
    with pytest.raises(ValueError, match="PIL cannot read text.jpg: not an image"):
        read_image(tmp_path / "images" / "text.jpg")
    monkeypatch.setenv(POLICY_ENV, "error")
    with pytest.raises(ValueError, match="bomb.png: image bomb.png: too large"):
        build_index(model, processor, tmp_path / "images", tmp_path / "other-cache", progress=False)
