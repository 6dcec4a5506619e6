"""No sample lost or mis-decoded between an image folder and training (issue 31): shards of mixed image formats keep
every sample, streamed pixels equal the processors' pixels for the same file (16-bit, grey, palette, transparency,
EXIF orientation), shards are verified against their manifest before anything streams (missing, truncated, empty,
non-tar and replaced shards named), and a sample whose JSON does not parse is skipped and counted; a damaged member
read by a data-loader worker of the training stream is skipped and counted, or, under the `error` policy, named."""

import io
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hf_longclip.cli import main as cli_main
from hf_longclip.data.shards import MANIFEST, SKIPPED, ShardError, ShardStream, verify_shards
from hf_longclip.modeling_common.images import to_rgb_images
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.streaming import StreamedBatches

FORMATS = ["png", "jpg", "gif", "bmp", "webp", "tiff", "png", "jpg"]


def pixels(image) -> np.ndarray:
    return np.asarray(image, dtype=np.int64)


def special_images() -> dict[str, Image.Image]:
    """One image of each mode whose conversion to RGB is not PIL's plain `convert("RGB")`, and ordinary ones."""
    ramp = np.arange(16 * 16).reshape(16, 16)
    palette = Image.fromarray((ramp % 4).astype(np.uint8), mode="P")
    palette.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9])
    palette.info["transparency"] = 3  # colour 3 (dark grey) is transparent: white after conversion
    rgba = np.zeros((16, 16, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, (ramp % 3) * 127  # red, transparent to opaque: the hidden colour is red
    return {
        "16-bit grey": Image.fromarray((ramp * 251).astype(np.uint16)),  # up to 64,000: PIL's convert gives white
        "8-bit grey": Image.fromarray((ramp % 256).astype(np.uint8)),
        "palette with a transparent colour": palette,
        "RGBA": Image.fromarray(rgba),
        "grey with alpha": Image.fromarray(np.stack([ramp % 200, (ramp % 2) * 255], -1).astype(np.uint8)),
        "RGB": Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)),
    }


def exif_rotated_jpeg(path) -> None:
    """A 16x8 JPEG whose EXIF orientation (6: rotate 90 degrees clockwise) says it is shown 8x16."""
    exif = Image.Exif()
    exif[0x0112] = 6
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (8, 16, 3), dtype=np.uint8))
    image.save(path, exif=exif.tobytes(), quality=95)


def image_folder(directory, images: dict[str, Image.Image]) -> dict[str, str]:
    """Write `images` as an image folder with `metadata.csv` (caption = name); {caption: file path}."""
    directory.mkdir()
    files, lines = {}, []
    for index, (name, image) in enumerate(images.items()):
        extension = "jpg" if name == "EXIF-rotated JPEG" else "png"
        path = directory / f"{index:02d}.{extension}"
        if name == "EXIF-rotated JPEG":
            exif_rotated_jpeg(path)
        else:
            image.save(path)
        files[name] = str(path)
        lines.append(f"{path.name},{name}\n")
    (directory / "metadata.csv").write_text("file_name,caption\n" + "".join(lines))
    return files


def shard(source, output, shard_size: int = 100) -> list[str]:
    cli_main(["shard", str(source), str(output), "--shard-size", str(shard_size)])
    return sorted(str(path) for path in output.glob("*.tar"))


def test_a_folder_of_mixed_formats_keeps_every_sample_with_the_processors_pixels(tmp_path):
    folder, lines = tmp_path / "mixed", []
    folder.mkdir()
    rng = np.random.default_rng(0)
    for index, extension in enumerate(FORMATS * 3):  # 24 images, 6 formats, the minority ones in between
        Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(folder / f"{index:02d}.{extension}")
        lines.append(f"{index:02d}.{extension},caption {index}\n")
    (folder / "metadata.csv").write_text("file_name,caption\n" + "".join(lines))
    urls = shard(folder, tmp_path / "shards", shard_size=10)
    with tarfile.open(urls[0]) as tar:
        assert {name.rsplit(".", 1)[1] for name in tar.getnames()} >= {"png", "jpg", "gif", "bmp", "webp", "tif"}
    rows = {row["caption"]: row for row in ShardStream(urls, buffer_size=0)}
    assert sorted(rows) == sorted(f"caption {i}" for i in range(24))
    for index, extension in enumerate(FORMATS * 3):
        expected = to_rgb_images(str(folder / f"{index:02d}.{extension}"))[0]
        assert np.array_equal(pixels(rows[f"caption {index}"]["image"]), pixels(expected)), extension


def test_streamed_images_are_converted_exactly_as_the_processors_convert_the_file(tmp_path):
    images = {**special_images(), "EXIF-rotated JPEG": None}
    files = image_folder(tmp_path / "modes", images)
    rows = {row["caption"]: row["image"] for row in ShardStream(shard(tmp_path / "modes", tmp_path / "s"),
                                                                 buffer_size=0)}
    assert sorted(rows) == sorted(images)
    for name, path in files.items():
        assert rows[name].mode == "RGB"
        assert np.array_equal(pixels(rows[name]), pixels(to_rgb_images(path)[0])), name
    # what that conversion is, by hand: 16-bit levels scaled (not clipped to white), transparency onto white
    sixteen = np.arange(256).reshape(16, 16) * 251
    assert np.array_equal(pixels(rows["16-bit grey"])[..., 0], np.rint(sixteen / 257))
    assert (pixels(rows["RGBA"])[special_alpha_mask()] == 255).all()
    palette = pixels(rows["palette with a transparent colour"])
    assert (palette[(np.arange(256).reshape(16, 16) % 4) == 3] == 255).all()
    assert rows["EXIF-rotated JPEG"].size == (8, 16)  # shown upright, as a processor reading the file shows it


def special_alpha_mask() -> np.ndarray:
    return (np.arange(256).reshape(16, 16) % 3) == 0  # the fully transparent pixels of the RGBA image


@pytest.fixture
def verified_shards(tmp_path):
    rng, lines = np.random.default_rng(0), []
    (tmp_path / "src").mkdir()
    for index in range(6):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(tmp_path / "src" / f"{index}.png")
        lines.append(f"{index}.png,caption {index}\n")
    (tmp_path / "src" / "metadata.csv").write_text("file_name,caption\n" + "".join(lines))
    return shard(tmp_path / "src", tmp_path / "shards", shard_size=2)


@pytest.mark.parametrize("damage", ["truncated", "empty", "not a tar"])
def test_a_damaged_shard_is_refused_at_start_up_naming_it(verified_shards, damage):
    path = verified_shards[1]
    data = open(path, "rb").read()
    replacement = {"truncated": data[:1200], "empty": b"", "not a tar": b"<html>404</html>"}[damage]
    open(path, "wb").write(replacement)
    with pytest.raises(ShardError, match=rf"1 of 3 training shards fail verification:\n  {path}: "
                                         rf"{len(replacement)} bytes, its manifest lists {len(data)}"):
        ShardStream(verified_shards)
    Path(path).with_name(MANIFEST).write_text('{"shards": []}')  # no manifest entry: read through as a tar
    with pytest.raises(ShardError, match=rf"{path}: does not end with a tar's end-of-archive blocks"):
        verify_shards(verified_shards)


def test_the_hash_on_request_catches_a_shard_replaced_by_one_of_the_same_size(verified_shards):
    first, second = verified_shards[0], verified_shards[1]
    swapped = open(second, "rb").read()
    assert len(swapped) == len(open(first, "rb").read())
    open(first, "wb").write(swapped)  # another shard's bytes: the size matches the manifest
    assert verify_shards(verified_shards) == [2, 2, 2]
    with pytest.raises(ShardError, match=rf"{first}: xxh3_128 [0-9a-f]{{32}}, its manifest lists"):
        verify_shards(verified_shards, checksum="xxh3_128")
    with pytest.raises(ValueError, match="checksum must be one of"):
        verify_shards(verified_shards, checksum="sha256")


def test_a_shard_damaged_after_start_up_is_named_when_read(verified_shards):
    stream = ShardStream(verified_shards, buffer_size=0)
    data = open(verified_shards[2], "rb").read()
    open(verified_shards[2], "wb").write(data[:700])  # inside the first sample's image
    with pytest.raises(ShardError, match=rf"shard {verified_shards[2]} cannot be read after 0 samples"):
        list(stream)


def tar_of(path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def test_invalid_json_is_skipped_and_counted_like_other_corrupt_samples(tmp_path):
    image = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(image, format="PNG")
    documents = [b'{"caption": "first"}', b'{"caption": "unterminated', b'["a list"]', b"\xff\xfe",
                 b'{"caption": "last"}']
    tar_of(tmp_path / "0.tar", [member for index, document in enumerate(documents)
                                for member in ((f"k{index}.png", image.getvalue()), (f"k{index}.json", document))])
    rows = list(ShardStream([str(tmp_path / "0.tar")], buffer_size=0))
    assert [row["caption"] for row in rows] == ["first", "last"]
    assert [row[SKIPPED] for row in rows] == [0, 3]


@pytest.fixture
def damaged_members(tmp_path) -> str:
    """A shard of six samples k0-k5 whose k1 image is garbage bytes and whose k3 JSON does not parse."""
    image = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(image, format="PNG")
    members = []
    for index in range(6):
        members.append((f"k{index}.png", b"\x89PNG garbage" if index == 1 else image.getvalue()))
        members.append((f"k{index}.json", b'{"caption": "k3' if index == 3 else b'{"caption": "k%d"}' % index))
    tar_of(tmp_path / "0.tar", members)
    return str(tmp_path / "0.tar")


def streamed_batches(shard_url: str, accelerator, tmp_path) -> StreamedBatches:
    """The training loop's stream of `shard_url` (one sample a batch, unshuffled), read by one data-loader worker."""
    args = LoopArguments(output_dir=str(tmp_path), train_shards=shard_url, per_device_train_batch_size=1,
                         dataloader_num_workers=1, shuffle_buffer=0)
    return StreamedBatches(args, lambda rows: {"captions": [row["caption"] for row in rows]}, accelerator)


def test_damaged_members_read_by_a_loader_worker_are_skipped_and_counted(damaged_members, accelerator, tmp_path):
    batches = streamed_batches(damaged_members, accelerator, tmp_path)
    assert [batch["captions"] for batch in batches.epoch(0)] == [["k0"], ["k2"], ["k4"], ["k5"]]
    assert batches.corrupt_samples == 2  # what the loop logs as `corrupt_samples`


def test_under_the_error_policy_a_damaged_member_stops_the_stream_naming_shard_and_sample(damaged_members, accelerator,
                                                                                         tmp_path, monkeypatch):
    monkeypatch.setenv("HF_LONGCLIP_BAD_SAMPLES", "error")
    batches = streamed_batches(damaged_members, accelerator, tmp_path)
    in_the_worker = rf"(?s)in DataLoader worker process 0.*{re.escape(damaged_members)}: sample k1: not an image "
    with pytest.raises(ValueError, match=in_the_worker + r".*; pass --bad-samples skip"):
        list(batches.epoch(0))
