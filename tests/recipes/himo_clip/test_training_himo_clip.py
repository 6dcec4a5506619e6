"""The main job's script under a real `accelerate launch`, tiny: pretrains (and caches) the short-caption base,
fine-tunes every variant from it, evaluates, writes results, plots and checkpoints that AutoModel loads; an
ablation over two seeds writes its JSON and PNG."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoProcessor

from helpers.launch import accelerate_launch, run, script_env
from hf_longclip.training.task import saved_options

TINY = ["--max_steps", "3", "--logging_steps", "1", "--num_train", "128", "--num_test", "32",
        "--per_device_train_batch_size", "16", "--hidden_size", "32", "--num_layers", "1", "--num_heads", "2",
        "--base_steps", "2"]

# Every test here launches examples/train_himo.py under accelerate launch: end to end, slow.
pytestmark = pytest.mark.slow


def launch(tmp_path, output_dir, *args: str):
    """train_himo.py on one process, tiny, its short-caption base cached under `tmp_path` for every launch."""
    return run(accelerate_launch("train_himo.py", output_dir, ["--num_processes", "1"], *TINY, "--base_cache_dir",
                                 str(tmp_path / "bases"), *args), script_env(tmp_path / "datasets"), tmp_path,
               timeout=600)


def test_accelerate_launch_train_himo_end_to_end(tmp_path):
    result = launch(tmp_path, tmp_path)
    assert "himo-clip" in result.stdout and "R@1 I2T" in result.stdout  # the results table
    assert "himo-clip step 1/3 {'loss'" in result.stderr  # the loop's records reach the log (info, main process)

    report = json.loads((tmp_path / "results.json").read_text())
    assert list(report["results"]) == ["clip-77-base", "clip-77", "clip-248", "longclip", "himo-clip"]
    assert [set(h) >= {"long_loss", "short_loss"} for h in report["training"]["longclip"]] == [True] * 3
    for metrics in report["results"].values():
        assert 0 <= metrics["r1_i2t"] <= 100 and 0 <= metrics["himo@2"] <= 100
        assert -1 <= metrics["himo@k"] <= 1 and metrics["ssi"] >= 0
    assert [h["step"] for h in report["training"]["himo-clip"]] == [1, 2, 3]
    for plot in ("prefix_similarity.png", "loss_curves.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "summary.png").exists()  # one seed: the table says it all

    # the base: pretrained once on first sentences, cached, and the variants start from its weights
    (base,) = (tmp_path / "bases").glob("clip77-*/clip-77")
    assert json.loads((base.parent / "base.json").read_text())["steps"] == 2
    base_weights = load_file(base / "model.safetensors")
    clip77_history = json.loads((base.parent / "eval" / "clip-77.json").read_text())["history"]
    assert [h["step"] for h in clip77_history] == [1, 2]
    reused = launch(tmp_path, tmp_path / "again", "--variants", "clip-77", "--max_steps", "1",
                    "--learning_rate", "0")  # lr 0: the fine-tuned weights are the base's
    assert "base CLIP-77: reusing the cached base" in reused.stdout
    tuned = load_file(tmp_path / "again" / "clip-77" / "model.safetensors")
    for name in ("text_model.embeddings.token_embedding.weight", "vision_model.embeddings.patch_embedding.weight"):
        assert torch.equal(tuned[name], base_weights[name]), name

    checkpoint = tmp_path / "himo-clip"
    model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True)
    processor = AutoProcessor.from_pretrained(checkpoint, trust_remote_code=True)
    # MoLo's options are the task's, saved beside each checkpoint (training_options.json), not in its config
    assert saved_options(model)["molo_lambda"] == 1.0 and not hasattr(model.config, "molo_lambda")
    assert model.config.text_config.max_position_embeddings == 248
    clip77 = AutoModel.from_pretrained(tmp_path / "clip-77")
    assert clip77.config.text_config.max_position_embeddings == 77 and saved_options(clip77)["molo_lambda"] == 0.0
    with torch.no_grad():
        out = model(**processor(text=["a picture of three shapes."], images=[_image()]))
    assert out.logits_per_image.shape == (1, 1)


def test_ablation_over_two_seeds_writes_its_table(tmp_path):
    result = launch(tmp_path, tmp_path, "--ablation", "table4", "--seeds", "0,1",
                    "--max_steps", "1")
    assert "mean ± std over seeds [0, 1]" in result.stdout and "tau=0.85" in result.stdout
    report = json.loads((tmp_path / "table4" / "table4.json").read_text())
    assert list(report["summary"]) == ["tau=0.8", "tau=0.85", "tau=0.9", "tau=0.95"]
    assert report["metrics"] == ["r1_i2t", "r1_t2i", "himo@2", "himo@3", "himo@k", "ssi", "hide_m"]
    kept = [report["summary"][row]["hide_m"]["mean"] for row in report["summary"]]
    assert kept == sorted(kept) and kept[0] >= 1  # a higher threshold keeps at least as many components
    assert (tmp_path / "table4" / "table4.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for seed in (0, 1):
        checkpoint = tmp_path / "table4" / f"seed-{seed}" / "tau=0.95"
        assert json.loads((checkpoint / "training_options.json").read_text())["hide_tau"] == 0.95
        assert "hide_tau" not in json.loads((checkpoint / "config.json").read_text())


def _image():
    from PIL import Image

    return Image.new("RGB", (64, 64), "white")
