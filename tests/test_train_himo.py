"""The main job's script under a real `accelerate launch`, tiny: trains, evaluates, writes results, plots and
checkpoints that AutoModel loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModel, AutoProcessor

REPO = Path(__file__).resolve().parents[1]


def test_accelerate_launch_train_himo_end_to_end(tmp_path):
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        str(REPO / "examples" / "train_himo.py"),
        "--output_dir", str(tmp_path), "--max_steps", "3", "--logging_steps", "1",
        "--num_train", "128", "--num_test", "32", "--per_device_train_batch_size", "16",
        "--hidden_size", "32", "--num_layers", "1", "--num_heads", "2",
    ]
    env = dict(os.environ, HF_DATASETS_CACHE=str(tmp_path / "datasets"))
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "himo-clip" in result.stdout and "r1_i2t" in result.stdout  # the results table
    assert "himo-clip step 1/3 {'loss'" in result.stderr  # the loop's records reach the log (info, main process)

    report = json.loads((tmp_path / "results.json").read_text())
    assert set(report["results"]) == {"clip-77", "clip-248", "himo-clip"}
    for metrics in report["results"].values():
        assert 0 <= metrics["r1_i2t"] <= 100 and 0 <= metrics["himo@2"] <= 100
        assert -1 <= metrics["himo@k"] <= 1
    assert [h["step"] for h in report["training"]["himo-clip"]] == [1, 2, 3]
    for plot in ("prefix_similarity.png", "loss_curves.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    checkpoint = tmp_path / "himo-clip"
    model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True)
    processor = AutoProcessor.from_pretrained(checkpoint, trust_remote_code=True)
    assert model.config.molo_lambda == 1.0 and model.config.text_config.max_position_embeddings == 248
    assert AutoModel.from_pretrained(tmp_path / "clip-77").config.text_config.max_position_embeddings == 77
    with torch.no_grad():
        out = model(**processor(text=["a picture of three shapes."], images=[_image()]))
    assert out.logits_per_image.shape == (1, 1)


def _image():
    from PIL import Image

    return Image.new("RGB", (64, 64), "white")
