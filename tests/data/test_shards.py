"""WebDataset shards: writing (manifest, checksums, re-runs that keep finished shards, every source kind), streaming
(disjoint and complete across processes and data-loader workers, order a function of seed and epoch, corrupt
samples skipped and counted, a missing shard refused), exact resume of the stream, and training on shards through
train_himo.py: a SIGKILLed run resumes to the weights of an uninterrupted one, in one process and under 2-process
DDP."""

import io
import json
import os
import stat
import tarfile

import datasets
import numpy as np
import pytest
import torch
from PIL import Image
from torchdata.stateful_dataloader import StatefulDataLoader

from helpers.launch import CONFIGS, accelerate_launch, kill_when_written, run, script_env, weights
from hf_longclip.cli import main as cli_main
from hf_longclip.data import shards as shards_module
from hf_longclip.data.shards import (
    MANIFEST,
    SKIPPED,
    ShardStream,
    expand_shards,
    shard_source,
    verify_shards,
    write_shards,
)
from hf_longclip.data.synthetic import load_synthetic_scenes
from hf_longclip.fileio import xxh3_128


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> datasets.Dataset:
    return load_synthetic_scenes(num_train=48, num_test=8, image_size=32,
                                 cache_dir=str(tmp_path_factory.mktemp("scenes")))["train"]


@pytest.fixture(scope="module")
def shards(scenes, tmp_path_factory):
    """48 scenes in 6 shards of 8."""
    directory = tmp_path_factory.mktemp("shards")
    write_shards(scenes, directory, shard_size=8, num_workers=2)
    return directory


def keys_of(stream: ShardStream, num_workers: int = 0, batch_size: int = 1) -> list[str]:
    loader = StatefulDataLoader(stream, batch_size=batch_size, num_workers=num_workers,
                                collate_fn=lambda rows: [row["__key__"] for row in rows])
    return [key for batch in loader for key in batch]


def test_write_shards_lists_every_shard_with_counts_and_checksums(scenes, shards):
    manifest = json.loads((shards / MANIFEST).read_text())
    assert manifest["num_samples"] == 48 and [s["name"] for s in manifest["shards"]] == [
        f"{i:05d}.tar" for i in range(6)]
    assert all(entry["samples"] == 8 for entry in manifest["shards"])
    assert all(entry["xxh3_128"] == xxh3_128(shards / entry["name"]) for entry in manifest["shards"])
    with tarfile.open(shards / "00002.tar") as tar:
        names = tar.getnames()
        assert names[:2] == ["00002_000000.png", "00002_000000.json"] and len(names) == 16
        fields = json.loads(tar.extractfile("00002_000000.json").read())
        image = Image.open(io.BytesIO(tar.extractfile("00002_000000.png").read()))
    row = scenes[16]
    assert fields["caption"] == row["caption"] and fields["sentences"] == row["sentences"]
    assert fields["captions"] == row["captions"] and fields["label"] == row["label"]
    assert (np.asarray(image.convert("RGB")) == np.asarray(row["image"].convert("RGB"))).all()
    assert verify_shards(expand_shards(str(shards / "{00000..00005}.tar"))) == [8] * 6


def test_a_rerun_keeps_finished_shards_and_rewrites_damaged_ones(scenes, tmp_path):
    write_shards(scenes, tmp_path, shard_size=16)
    before = {path.name: path.stat().st_mtime_ns for path in tmp_path.glob("*.tar")}
    original = (tmp_path / "00001.tar").read_bytes()
    (tmp_path / "00001.tar").write_bytes(original[:100])  # a crash mid-write would leave no such file, a disk might
    write_shards(scenes, tmp_path, shard_size=16)
    after = {path.name: path.stat().st_mtime_ns for path in tmp_path.glob("*.tar")}
    assert after["00000.tar"] == before["00000.tar"] and after["00002.tar"] == before["00002.tar"]
    assert (tmp_path / "00001.tar").read_bytes() == original  # rewritten, byte-identical


def test_a_shard_is_written_atomically_with_a_plain_files_permissions(scenes, tmp_path, monkeypatch):
    write_shards(scenes, tmp_path, shard_size=16)
    umask = os.umask(0)
    os.umask(umask)
    assert {stat.S_IMODE(path.stat().st_mode) for path in tmp_path.iterdir()} == {0o666 & ~umask}
    finished = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    (tmp_path / "00001.tar").unlink()
    calls, image_bytes = iter(range(1_000_000)), shards_module._image_bytes

    def failing(cell):  # the rewritten shard's fourth image fails mid-write
        if next(calls) == 3:
            raise RuntimeError("killed mid-shard")
        return image_bytes(cell)

    monkeypatch.setattr(shards_module, "_image_bytes", failing)
    with pytest.raises(RuntimeError, match="mid-shard"):
        write_shards(scenes, tmp_path, shard_size=16)
    # no partial shard, no temporary file left, the manifest of the last complete run untouched
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == {
        name: data for name, data in finished.items() if name != "00001.tar"}


def test_csv_jsonl_and_image_folder_sources(tmp_path):
    for index in range(3):
        Image.new("RGB", (8, 8), (80 * index, 0, 0)).save(tmp_path / f"{index}.png")
    (tmp_path / "pairs.csv").write_text("image,caption\n" + "".join(f"{i}.png,caption {i}\n" for i in range(3)))
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"image": f"{i}.png", "caption": f"caption {i}"}) + "\n"
                                                  for i in range(3)))
    (tmp_path / "metadata.csv").write_text("file_name,caption\n" + "".join(f"{i}.png,caption {i}\n" for i in range(3)))
    for source in ("pairs.csv", "pairs.jsonl", ""):
        dataset = shard_source(str(tmp_path / source))
        assert dataset["caption"] == ["caption 0", "caption 1", "caption 2"], source
        assert dataset[2]["image"].getpixel((0, 0)) == (160, 0, 0), source
    (tmp_path / "bad.csv").write_text("path,text\n0.png,x\n")
    with pytest.raises(ValueError, match="image .* caption"):
        shard_source(str(tmp_path / "bad.csv"))


def test_processes_and_workers_see_disjoint_samples_covering_the_epoch(shards):
    urls = expand_shards(str(shards / "{00000..00005}.tar"))
    everything = keys_of(ShardStream(urls, buffer_size=0))
    assert len(everything) == 48 == len(set(everything))
    per_process = [keys_of(ShardStream(urls, rank, 2, buffer_size=16), num_workers=2) for rank in (0, 1)]
    assert not set(per_process[0]) & set(per_process[1])
    assert sorted(per_process[0] + per_process[1]) == sorted(everything)
    with pytest.raises(ValueError, match="multiple of 4"):
        ShardStream(urls, 0, 4)


def test_the_order_is_a_function_of_seed_and_epoch(shards):
    urls = expand_shards(str(shards / "{00000..00005}.tar"))
    first, again, other_seed = (ShardStream(urls, seed=seed, buffer_size=16) for seed in (0, 0, 1))
    assert keys_of(first) == keys_of(again) != keys_of(other_seed)
    epoch_0 = keys_of(first)
    first.set_epoch(1)
    assert keys_of(first) != epoch_0 and sorted(keys_of(first)) == sorted(epoch_0)


def test_a_resumed_stream_continues_with_the_next_unseen_sample(shards):
    urls = expand_shards(str(shards / "{00000..00005}.tar"))
    for workers in (0, 2):
        def loader():
            return StatefulDataLoader(ShardStream(urls, seed=3, buffer_size=16), batch_size=4, num_workers=workers,
                                      collate_fn=lambda rows: [row["__key__"] for row in rows])

        uninterrupted = list(loader())
        interrupted = loader()
        iterator = iter(interrupted)
        seen = [next(iterator) for _ in range(5)]
        state = interrupted.state_dict()
        del iterator
        resumed = loader()
        resumed.load_state_dict(state)
        assert seen + list(resumed) == uninterrupted, workers


def corrupt_shard(path, good: Image.Image) -> None:
    """Four samples: fine, undecodable image bytes, no caption, fine."""
    buffer = io.BytesIO()
    good.save(buffer, format="PNG")
    samples = [(buffer.getvalue(), {"caption": "first"}), (b"not an image", {"caption": "bad bytes"}),
               (buffer.getvalue(), {"captions": ["no caption field"]}), (buffer.getvalue(), {"caption": "last"})]
    with tarfile.open(path, "w") as tar:
        for index, (image, fields) in enumerate(samples):
            fields = {"caption": None, "captions": [], **fields}
            for name, payload in ((f"k{index}.png", image), (f"k{index}.json", json.dumps(fields).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


def test_corrupt_samples_are_skipped_and_counted_and_a_missing_shard_is_refused(tmp_path):
    corrupt_shard(tmp_path / "0.tar", Image.new("RGB", (8, 8), "red"))
    rows = list(ShardStream([str(tmp_path / "0.tar")], buffer_size=0))
    assert [row["caption"] for row in rows] == ["first", "last"]
    assert [row[SKIPPED] for row in rows] == [0, 2]  # the two skipped just before "last"
    assert rows[0]["image"].mode == "RGB"
    with pytest.raises(FileNotFoundError, match=r"1 of 2 training shards do not exist: .*1\.tar"):
        ShardStream([str(tmp_path / "0.tar"), str(tmp_path / "1.tar")])


def test_the_shard_command_writes_shards(tmp_path, capsys):
    cli_main(["shard", "synthetic", str(tmp_path / "out"), "--data-dir", str(tmp_path / "cache"), "--split", "test",
              "--max-samples", "10", "--shard-size", "4"])
    assert "10 samples in" in capsys.readouterr().out
    assert [entry["samples"] for entry in json.loads((tmp_path / "out" / MANIFEST).read_text())["shards"]] == [4, 4, 2]
    with pytest.raises(SystemExit):
        cli_main(["shard", str(tmp_path / "missing.csv"), str(tmp_path / "x")])


TINY = ["--variants", "himo-clip", "--num_train", "64", "--num_test", "16", "--hidden_size", "32", "--num_layers", "1",
        "--num_heads", "2", "--logging_steps", "1", "--warmup_steps", "1", "--num_train_epochs", "2",
        "--checkpointing_steps", "2", "--dataloader_num_workers", "2", "--shuffle_buffer", "16", "--base_steps", "0"]


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "processes"), [
    # two processes: each resumes its own shard stream (the one-process stream's resume is the fast test above)
    pytest.param(["--config_file", str(CONFIGS / "multi_gpu.yaml")], 2, id="ddp"),
])
def test_killed_run_on_shards_resumes_to_the_weights_of_an_uninterrupted_run(engine, processes, shards, tmp_path):
    def command(output_dir):
        return accelerate_launch("train_himo.py", output_dir, [*engine, "--num_processes", str(processes)], *TINY,
                                 "--train_shards", str(shards / "{00000..00005}.tar"), "--verify_shards", "xxh3_128",
                                 "--per_device_train_batch_size", str(8 // processes))

    env = script_env(tmp_path / "datasets")
    run(command(tmp_path / "uninterrupted"), env, tmp_path)
    interrupted = command(tmp_path / "interrupted")
    kill_when_written(interrupted, tmp_path / "interrupted" / "checkpoints" / "himo-clip" / "step_00000004", env,
                      tmp_path)
    assert not (tmp_path / "interrupted" / "himo-clip").exists(), "the run finished before it was killed"
    run([*interrupted, "--resume_from_checkpoint", "latest"], env, tmp_path)
    histories = [json.loads((tmp_path / name / "results.json").read_text())["training"]["himo-clip"]
                 for name in ("uninterrupted", "interrupted")]
    # the schedule's length: 2 epochs of the manifest's estimate, 48 / 8 - 1 batches (2 workers may each drop one)
    assert histories[0] == histories[1] and len(histories[0]) == 10
    assert all(record["corrupt_samples"] == 0 for record in histories[0])
    expected, resumed = (weights(tmp_path / "uninterrupted" / "himo-clip"),
                         weights(tmp_path / "interrupted" / "himo-clip"))
    for name in expected:
        assert torch.equal(resumed[name], expected[name]), name
