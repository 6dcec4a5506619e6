"""CAST in training: 2 gloo processes (DDP) give the gradients of one process on the concatenated batch, and
examples/train_cast.py runs end to end (one process, 2-process DDP, 2-process DeepSpeed ZeRO-2) on tiny settings and
publishes CAST with its card.

CAST's stem has BatchNorm, whose batch statistics are per process under DDP (SyncBatchNorm needs CUDA), so the
gradient check runs the stem's BatchNorm on its running statistics; everything else in CAST (pooling, sampling,
assignment) is per image, which is what makes the shards add up."""

import json
import sys
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from transformers import AutoModelForImageClassification

from helpers.cast import tiny_classifier
from helpers.fake_hub import FakeHub
from helpers.hub import TOKEN, hub_env, load_by_repo_id_without_the_library
from helpers.launch import accelerate_launch, run, script_env, torchrun
from hf_longclip import CASTForImageClassification

WORLD_SIZE = 2
TINY = ["--num_train", "64", "--num_test", "16", "--image_size", "48", "--num_clusters", "4,2",
        "--hidden_size", "32", "--num_attention_heads", "2", "--max_steps", "3", "--logging_steps", "1",
        "--warmup_steps", "1"]



def per_rank_step(reference_path: str) -> None:
    """Run by each of the torchrun processes (see __main__ below)."""
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == WORLD_SIZE
    reference = torch.load(reference_path)
    model = accelerator.prepare(tiny_classifier())
    rank, n = accelerator.process_index, len(reference["batch"]["labels"]) // WORLD_SIZE
    loss = model(**{k: v[rank * n : (rank + 1) * n] for k, v in reference["batch"].items()}).loss
    accelerator.backward(loss)  # DDP averages the gradients over processes
    torch.testing.assert_close(accelerator.reduce(loss.detach(), reduction="mean"), reference["loss"], atol=1e-5,
                               rtol=0)
    for name, param in accelerator.unwrap_model(model).named_parameters():
        torch.testing.assert_close(param.grad, reference["grads"][name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.slow
def test_two_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    model = tiny_classifier()
    generator = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 16, (8, 4, 4), generator=generator)
    batch = {"pixel_values": torch.randn(8, 3, 32, 32, generator=generator),
             "superpixels": blocks.repeat_interleave(8, 1).repeat_interleave(8, 2),
             "labels": torch.randint(0, 5, (8,), generator=generator)}
    loss = model(**batch).loss
    loss.backward()
    reference = tmp_path / "reference.pt"
    torch.save({"batch": batch, "loss": loss.detach(),
                "grads": {name: p.grad.clone() for name, p in model.named_parameters()}}, reference)
    torchrun(__file__, str(reference))


def launch(output_dir: Path, launch_args: list[str], *script_args: str):
    return run(accelerate_launch("train_cast.py", output_dir, launch_args, *TINY, *script_args),
               script_env(output_dir.parent / "datasets"), output_dir.parent)


@pytest.mark.slow
def test_train_cast_runs_saves_and_reloads(tmp_path):
    """train_cast.py end to end, once, in one process at its smallest size (the loop's DDP and ZeRO paths are tested
    once for every model in training/test_train_scale.py; CAST's own two-process equality is the test above)."""
    engine = ["--num_processes", "1"]
    output_dir = tmp_path / "run"
    result = launch(output_dir, engine, "--per_device_train_batch_size", "8")
    assert "cast:" in result.stdout and "vit:" in result.stdout and "test accuracy" in result.stdout
    results = json.loads((output_dir / "results.json").read_text())["results"]
    assert set(results) == {"cast", "vit"} and all(0 <= r["test_accuracy"] <= 100 for r in results.values())
    assert (output_dir / "hierarchy.png").stat().st_size > 0
    model = AutoModelForImageClassification.from_pretrained(output_dir / "cast", trust_remote_code=True)
    assert isinstance(model, CASTForImageClassification) and model.config.num_clusters == [4, 2]
    assert (output_dir / "cast" / "preprocessor_config.json").is_file()


@pytest.mark.slow
def test_push_to_hub_publishes_cast_with_its_card(tmp_path):
    with FakeHub(token=TOKEN) as hub:
        output_dir = tmp_path / "run"
        env = {**hub_env(hub, tmp_path / "home"), "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
        result = run(accelerate_launch("train_cast.py", output_dir, ["--num_processes", "1"], *TINY, "--push_to_hub",
                                       "--hub_model_id", "lab/cast-tiny"), env, tmp_path)
        assert f"pushed cast to {hub.url}/lab/cast-tiny/commit/" in result.stdout and "pushed vit" not in result.stdout
        card = hub.file("lab/cast-tiny", "README.md").decode()
        accuracy = json.loads((output_dir / "results.json").read_text())["results"]["cast"]["test_accuracy"]
        assert "pipeline_tag: image-classification" in card and f"value: {accuracy}" in card
        assert "top-1 accuracy (%)" in card and "{{" not in card
        loaded = load_by_repo_id_without_the_library(hub, "lab/cast-tiny", tmp_path / "fresh",
                                                     "AutoModelForImageClassification")
    assert loaded["class"] == "CASTForImageClassification" and loaded["module"].startswith("transformers_modules.")


if __name__ == "__main__":
    per_rank_step(*sys.argv[1:])
