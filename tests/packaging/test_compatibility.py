"""Checkpoints load where users are: the compatibility matrix (scripts/compat_matrix.py) cut to what CI runs, the
oldest releases (4.57, the last 4.x, and 5.0) for one CLIP-based model (HiMo-CLIP, with its text encoder folder) and
F-CAST. The script builds the environments from the package registry (kept under ~/.cache/hf-longclip-compat between
runs), saves the checkpoints with the library, and loads them there without hf-longclip: outputs equal to the saving
process's, rotary and position buffers equal to a fresh model's, weights a checkpoint lacks initialised, F-CAST's
text processed without OpenCV. docs/compatibility.md holds the whole matrix."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RELEASES = ("4.57.6", "5.0.0")
MODELS = ("himo_clip", "fcast")


@pytest.mark.slow  # builds virtual environments (the first time: minutes of downloads from the package registry)
def test_checkpoints_load_on_transformers_4_57_and_5_0_without_the_library(tmp_path):
    report = tmp_path / "matrix.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "compat_matrix.py"), "--releases", *RELEASES,
                           "--models", *MODELS, "--output", str(report)], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    matrix = json.loads(report.read_text())["matrix"]
    assert sorted(matrix) == sorted(RELEASES)
    for release, results in matrix.items():
        for name in MODELS:
            result = results[name]
            assert result["status"] == "pass", f"transformers {release}, {name}: {result}"
            assert {"outputs equal", "device_map load equal", "buffers equal a fresh model's",
                    "missing weights initialised"} <= set(result["checks"])
            assert result["max_difference"] <= 1e-5
        assert "text encoder folder loads as CLIPTextModel" in results["himo_clip"]["checks"]
        assert "text processed without OpenCV" in results["fcast"]["checks"]
