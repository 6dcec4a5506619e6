"""examples/train_ditm.py under a real `accelerate launch` on CPU: the Table IV miniature and its plot, two processes
(DDP through the warm-up switch; ZeRO-2 and ZeRO-3 without warm-up) equal to one process on the same global batch,
and a killed run resuming to the weights of an uninterrupted one (the task's step count, hence the warm-up, restored).

Each launch trains a tiny model (width 32, one layer) on 64 synthetic scenes for a few steps.
"""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

from helpers.launch import (
    CONFIGS,
    NOISE_ONLY,
    accelerate_launch,
    kill_when_written,
    needs_deepspeed,
    run,
    script_env,
    weights,
)
from hf_longclip.training.task import saved_options

TINY = ["--num_train", "64", "--num_test", "24", "--image_size", "32", "--hidden_size", "32", "--num_layers", "1",
        "--num_heads", "2", "--logging_steps", "1", "--warmup_steps", "1", "--per_device_eval_batch_size", "32",
        "--base_steps", "2"]
GLOBAL_BATCH = 8  # images; 8 steps per epoch on 64 scenes

# Every test here launches examples/train_ditm.py under accelerate launch: end to end, slow.
pytestmark = pytest.mark.slow


def launch(output_dir: Path, launch_args: list[str], *script_args: str) -> list[str]:
    return accelerate_launch("train_ditm.py", output_dir, launch_args, *TINY, "--base_cache_dir",
                             str(output_dir / "bases"), *script_args)


def cached_base(output_dir: Path) -> Path:
    (base,) = (output_dir / "bases").glob("infonce248-*/clip-infonce")
    return base


def history(output_dir: Path, variant: str = "adaptive+order") -> list[dict]:
    return json.loads((output_dir / "results.json").read_text())["training"][variant]


def test_table_iv_miniature_and_levels_plot(datasets_cache, tmp_path):
    result = run(launch(tmp_path, ["--num_processes", "1"], "--max_steps", "3", "--ditm_warmup_epochs", "0.125",
                        "--per_device_train_batch_size", str(GLOBAL_BATCH)),
                 script_env(datasets_cache), tmp_path)
    header = result.stdout.splitlines()
    assert any(line.split() == ["model", "R@1", "I2T", "R@1", "T2I", "RSUM", "HierarCaps", "P", "HierarCaps", "R",
                                "d_corr", "root", "d_corr", "image", "train", "s"] for line in header)
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["results"]) == ["clip-infonce", "vse++", "adaptive", "adaptive+order"]
    assert len(results["training"]["clip-infonce"]) == 2  # the base CLIP: --base_steps, global InfoNCE
    base = AutoModel.from_pretrained(cached_base(tmp_path), trust_remote_code=True)
    assert type(base).__name__ == "DITMModel"  # GPO pretrained with the towers: the variants start as the base
    for variant, values in results["results"].items():
        assert len(values["distance_by_level"]) == 4 and 0 <= values["rsum"] <= 600
        if variant == "clip-infonce":
            continue
        model = AutoModel.from_pretrained(tmp_path / variant, trust_remote_code=True)
        assert type(model).__name__ == "DITMModel"
        # tau and lambda are the task's options, saved beside the checkpoint, not in its config
        assert saved_options(model)["order_weight"] == (0.07 if variant == "adaptive+order" else 0.0)
        assert not hasattr(model.config, "order_weight")
        assert not torch.equal(model.text_model.final_layer_norm.weight, base.text_model.final_layer_norm.weight)
        assert not torch.equal(model.image_pooler.linear.weight, base.image_pooler.linear.weight)
    assert [record["warm_up"] for record in history(tmp_path)] == [1.0, 0.0, 0.0]  # 0.125 epoch = 1 step
    assert "order_loss" in history(tmp_path)[0] and "order_loss" not in history(tmp_path, "adaptive")[0]
    for png in ("levels.png", "loss_curves.png"):
        assert (tmp_path / png).stat().st_size > 10_000


@pytest.mark.parametrize("backbone, model_class", [("himo_clip", "HiMoCLIPModel"), ("onelip", "OneLIPModel")])
def test_ditm_objective_trains_other_backbones(backbone, model_class, datasets_cache, tmp_path):
    run(launch(tmp_path, ["--num_processes", "1"], "--backbone", backbone, "--variants", "adaptive+order",
               "--max_steps", "2", "--ditm_warmup_epochs", "0.125", "--per_device_train_batch_size", str(GLOBAL_BATCH)),
        script_env(datasets_cache), tmp_path)
    assert {"triplet_loss", "order_loss"} <= set(history(tmp_path)[0])
    model = AutoModel.from_pretrained(tmp_path / "adaptive+order", trust_remote_code=True)
    assert type(model).__name__ == model_class


@pytest.fixture(scope="module")
def single_process(tmp_path_factory, datasets_cache):
    """The one-process reference on the global batch, per warm-up length (in epochs), run once each."""
    runs = {}

    def reference(warmup_epochs: str) -> Path:
        if warmup_epochs not in runs:
            runs[warmup_epochs] = tmp_path_factory.mktemp("single")
            run(launch(runs[warmup_epochs], ["--num_processes", "1"], *SAME_DRAWS,
                       "--ditm_warmup_epochs", warmup_epochs, "--per_device_train_batch_size", str(GLOBAL_BATCH)),
                script_env(datasets_cache), runs[warmup_epochs])
        return runs[warmup_epochs]

    return reference


# All 6 positives per image, so that one and two processes draw the same captions (which ones are drawn depends on
# the local batch).
SAME_DRAWS = ["--variants", "adaptive+order", "--max_steps", "3", "--captions_per_image", "6"]


@pytest.mark.parametrize("engine, warmup_epochs", [
    # one warm-up step (frozen vision transformer, all negatives), then hardest negatives
    pytest.param(["--config_file", str(CONFIGS / "multi_gpu.yaml")], "0.125", id="ddp"),
    # DDP only: DITM's warm-up (frozen vision tower) across processes is its own; ZeRO-2/3 are the loop's, tested
    # once in training/test_train_scale.py, and the warm-up is refused under DeepSpeed (test below)
])
def test_two_processes_equal_one_process(engine, warmup_epochs, single_process, datasets_cache, tmp_path):
    run(launch(tmp_path, [*engine, "--num_processes", "2"], *SAME_DRAWS, "--ditm_warmup_epochs", warmup_epochs,
               "--per_device_train_batch_size", str(GLOBAL_BATCH // 2)),
        script_env(datasets_cache), tmp_path)
    reference = single_process(warmup_epochs)
    for key in ("loss", "triplet_loss", "order_loss"):
        assert [h[key] for h in history(tmp_path)] == pytest.approx([h[key] for h in history(reference)],
                                                                    rel=1e-5), key
    expected = weights(reference / "adaptive+order")
    model = AutoModel.from_pretrained(tmp_path / "adaptive+order", trust_remote_code=True)
    for name, value in expected.items():
        if not name.endswith(NOISE_ONLY):
            torch.testing.assert_close(model.state_dict()[name], value, atol=1e-6, rtol=0, msg=name)


@needs_deepspeed
def test_warm_up_under_deepspeed_is_refused(datasets_cache, tmp_path):
    result = subprocess.run(launch(tmp_path, ["--config_file", str(CONFIGS / "zero2.yaml"), "--num_processes", "1"],
                                   *SAME_DRAWS, "--ditm_warmup_epochs", "0.125"),
                            check=False, env=script_env(datasets_cache), cwd=tmp_path, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode != 0 and "--ditm_warmup_epochs needs one process or DDP" in result.stderr


def test_killed_run_resumes_to_the_weights_of_an_uninterrupted_run(datasets_cache, tmp_path):
    steps = ["--variants", "adaptive+order", "--max_steps", "8", "--checkpointing_steps", "2",
             "--ditm_warmup_epochs", "0.375", "--per_device_train_batch_size", str(GLOBAL_BATCH)]  # warm-up: 3 steps
    uninterrupted = tmp_path / "uninterrupted"
    run(launch(uninterrupted, ["--num_processes", "1"], *steps), script_env(datasets_cache), tmp_path)
    interrupted = tmp_path / "interrupted"
    command = launch(interrupted, ["--num_processes", "1"], *steps)
    kill_when_written(command, interrupted / "checkpoints" / "adaptive+order" / "step_00000002",
                      script_env(datasets_cache), tmp_path)
    assert not (interrupted / "adaptive+order").exists(), "the run finished before it was killed"
    run([*command, "--resume_from_checkpoint", "latest"], script_env(datasets_cache), tmp_path)
    resumed, expected = weights(interrupted / "adaptive+order"), weights(uninterrupted / "adaptive+order")
    for name in expected:
        torch.testing.assert_close(resumed[name], expected[name], atol=1e-6, rtol=0, msg=name)
    assert [h["warm_up"] for h in history(interrupted)] == [1.0] * 3 + [0.0] * 5
    assert [h["loss"] for h in history(interrupted)] == pytest.approx([h["loss"] for h in history(uninterrupted)],
                                                                       rel=1e-6)
