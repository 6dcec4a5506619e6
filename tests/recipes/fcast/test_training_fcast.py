"""examples/train_fcast.py under a real `accelerate launch`, tiny: one process (Table 2's rows and Table 5's),
2-process DeepSpeed ZeRO-2 and ZeRO-3 (FLAIR and F-CAST; the table, the grounding figures, checkpoints AutoModel
reloads), a run killed mid-way that resumes to the weights of an uninterrupted one, and `--push_to_hub` with
F-CAST's model card (src/hf_longclip/recipes/fcast/model_card.md; loaded back by repo id with the package absent)."""

import json

import pytest
import torch
from transformers import AutoModel, AutoProcessor

from helpers.fake_hub import FakeHub
from helpers.hub import TOKEN, hub_env, load_by_repo_id_without_the_library
from helpers.launch import CONFIGS, accelerate_launch, kill_when_written, needs_deepspeed, run, script_env, weights
from hf_longclip import FCASTModel
from hf_longclip.training.task import saved_options

TINY = ["--num_train", "64", "--num_test", "16", "--image_size", "32", "--num_segments", "16", "--num_clusters",
        "8,4", "--hidden_size", "32", "--grounding_images", "4", "--dataloader_num_workers", "0", "--max_steps", "4",
        "--logging_steps", "1", "--warmup_steps", "1", "--base_steps", "2"]
VARIANTS = ["flair", "flair-cast", "flair-cast-hier", "fcast", "fcast-no-part"]
METRICS = ("r1_i2t", "r1_t2i", "hard_r1_i2t", "hard_r1_t2i", "pointing_game", "box_mass", "map_difference")


def launch(output_dir, launch_args: list[str], *script_args: str) -> list[str]:
    # the bases are cached beside the run: the runs of one test share them
    return accelerate_launch("train_fcast.py", output_dir, launch_args, *TINY, "--base_cache_dir",
                             str(output_dir.parent / "bases"), *script_args)


@pytest.mark.slow
@pytest.mark.parametrize("engine", [
    pytest.param(["--num_processes", "1"], id="single"),
    # ZeRO-3 only: F-CAST's task registers the pooling's external parameters with DeepSpeed (recipes/fcast/task.py),
    # a path of its own; ZeRO-2 and DDP are the loop's, tested once in training/test_train_scale.py
    pytest.param(["--config_file", str(CONFIGS / "zero3.yaml"), "--num_processes", "2"], id="zero3",
                 marks=needs_deepspeed),
])
def test_train_fcast_end_to_end(engine, tmp_path):
    batch = "8" if engine[-1] == "1" else "4"  # the same global batch of 8 images
    variants = VARIANTS if engine[-1] == "1" else ["flair", "fcast"]  # sharded: the ViT and CAST towers
    result = run(launch(tmp_path / "run", engine, "--per_device_train_batch_size", batch, "--variants",
                        ",".join(variants)), script_env(tmp_path / "ds"), tmp_path)
    assert "pointing game" in result.stdout and "train s" in result.stdout
    assert all(name in result.stdout for name in variants)
    report = json.loads((tmp_path / "run" / "results.json").read_text())
    assert list(report["results"]) == ["base-vit", "base-cast", *variants]  # the bases as they are, then the rows
    assert "train_seconds" not in report["results"]["base-cast"] and list(report["training"]) == variants
    for metrics in report["results"].values():
        assert all(0 <= metrics[name] <= 100 for name in METRICS)
    training = report["training"]
    assert [record["step"] for record in training["fcast"]] == [1, 2, 3, 4]
    assert {"part_loss", "whole_loss"} <= training["fcast"][0].keys()
    assert {"text_conditioned_loss", "multi_positive_loss"} <= training["flair"][0].keys()
    if "fcast-no-part" in training:
        assert "part_loss" not in training["fcast-no-part"][0]
    for name in ("fcast", "flair"):
        assert (tmp_path / "run" / f"grounding-{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    model = AutoModel.from_pretrained(tmp_path / "run" / "fcast", trust_remote_code=True)
    # the objective and L_part's weight are the task's options, saved beside the checkpoint, not in its config
    assert isinstance(model, FCASTModel) and saved_options(model) == {"objective": "fcast", "part_loss_weight": 1.0,
                                                        "nonpaper_detach_stage1_from_part_loss": False}
    assert not hasattr(model.config, "part_loss_weight") and not hasattr(model.config, "objective")
    flair = AutoModel.from_pretrained(tmp_path / "run" / "flair", trust_remote_code=True)
    assert (flair.config.vision_backbone, saved_options(flair)["objective"],
            flair.config.text_config.num_stage2_layers) == ("vit", "flair", 0)
    if "fcast-no-part" in training:
        no_part = AutoModel.from_pretrained(tmp_path / "run" / "fcast-no-part", trust_remote_code=True)
        assert saved_options(no_part) == {"objective": "fcast", "part_loss_weight": 0.0,
                                          "nonpaper_detach_stage1_from_part_loss": False}
    assert AutoProcessor.from_pretrained(tmp_path / "run" / "flair", trust_remote_code=True).num_chunks == 1


@pytest.mark.slow
def test_killed_run_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    command = launch(tmp_path / "uninterrupted", ["--num_processes", "1"], "--variants", "fcast",
                     "--per_device_train_batch_size", "8", "--checkpointing_steps", "2")
    env = script_env(tmp_path / "ds")
    run(command, env, tmp_path)
    # the script's default: the pooling, new on the pretrained towers, learns at 10x the rest's 1e-3
    saved = torch.load(tmp_path / "uninterrupted" / "checkpoints" / "fcast" / "step_00000002" / "optimizer.bin",
                       weights_only=True)
    pool_size = sum(name.startswith("grounding_pool.") for name in weights(tmp_path / "uninterrupted" / "fcast"))
    rates = {}
    for group in saved["param_groups"]:
        rates[group["initial_lr"]] = rates.get(group["initial_lr"], 0) + len(group["params"])
    assert sorted(rates) == pytest.approx([1e-3, 1e-2]) and rates[max(rates)] == pool_size > 0
    interrupted = launch(tmp_path / "interrupted", ["--num_processes", "1"], "--variants", "fcast",
                         "--per_device_train_batch_size", "8", "--checkpointing_steps", "2")
    kill_when_written(interrupted, tmp_path / "interrupted" / "checkpoints" / "fcast" / "step_00000002", env, tmp_path)
    assert not (tmp_path / "interrupted" / "fcast").exists(), "the run finished before it was killed"
    run([*interrupted, "--resume_from_checkpoint", "latest"], env, tmp_path)
    histories = [json.loads((tmp_path / name / "results.json").read_text())["training"]["fcast"]
                 for name in ("uninterrupted", "interrupted")]
    assert histories[0] == histories[1]
    expected, resumed = weights(tmp_path / "uninterrupted" / "fcast"), weights(tmp_path / "interrupted" / "fcast")
    for name in expected:
        assert torch.equal(resumed[name], expected[name]), name


@pytest.mark.slow
def test_push_to_hub_renders_the_card_and_loads_by_repo_id_without_the_package(tmp_path):
    with FakeHub(token=TOKEN) as hub:
        env = {**hub_env(hub, tmp_path / "home"), "HF_DATASETS_CACHE": str(tmp_path / "ds")}
        result = run(launch(tmp_path / "run", ["--num_processes", "1"], "--variants", "fcast", "--max_steps", "2",
                            "--per_device_train_batch_size", "8", "--push_to_hub", "--hub_model_id", "lab/fcast-tiny"),
                     env, tmp_path)
        assert f"pushed fcast to {hub.url}/lab/fcast-tiny/commit/" in result.stdout
        card = hub.file("lab/fcast-tiny", "README.md").decode()
        pointing = json.loads((tmp_path / "run" / "results.json").read_text())["results"]["fcast"]["pointing_game"]
        assert "model-index" in card and f"value: {pointing}" in card and "grounding: pointing game (%)" in card
        assert "{{" not in card and "{%" not in card
        loaded = load_by_repo_id_without_the_library(hub, "lab/fcast-tiny", tmp_path / "fresh")
    assert loaded["class"] == "FCASTModel" and loaded["module"].startswith("transformers_modules.")
