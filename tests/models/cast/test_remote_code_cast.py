"""A CAST checkpoint loads with AutoModel / AutoImageProcessor(trust_remote_code=True) where hf_longclip is not
importable, offline, and gives the same outputs; `modeling/` holds what save_pretrained writes; without OpenCV the
checkpoint still loads and runs on superpixels computed before, and computing them names the packages to install."""

import filecmp
import json
import subprocess
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from helpers.fresh_process import fresh_process
from hf_longclip import CASTForImageClassification, CASTImageProcessor, CASTVisionConfig, CASTVisionModel
from hf_longclip.export import model_bundle

REPO = Path(__file__).resolve().parents[3]

FRESH_PROCESS_CAST = """
import sys
sys.modules["hf_longclip"] = None  # the library is not importable: only the checkpoint's own code may run
{block}
import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoModel, AutoModelForImageClassification
checkpoint, output = sys.argv[1], sys.argv[2]
processor = AutoImageProcessor.from_pretrained(checkpoint, trust_remote_code=True)
model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
classifier = AutoModelForImageClassification.from_pretrained(f"{{checkpoint}}/classifier", trust_remote_code=True)
inputs = processor([Image.open(f"{{checkpoint}}/image.png")])
with torch.no_grad():
    out = model(**inputs)
    logits = classifier.eval()(**inputs).logits
model.save_pretrained(output + ".resaved")  # the remote code saves itself again, unchanged
processor.save_pretrained(output + ".resaved")
torch.save({{"pooled": out.pooler_output, "superpixels": inputs["superpixels"], "logits": logits,
            "classes": [type(model).__module__, type(processor).__module__]}}, output)
"""


HIDE_OPENCV = """
class NotInstalled:  # imports of cv2 fail as they do where OpenCV is not installed
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "cv2":
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NotInstalled)
"""


def run_fresh(checkpoint: Path, tmp_path: Path, block: str = "") -> subprocess.CompletedProcess:
    return fresh_process(FRESH_PROCESS_CAST.format(block=block), str(checkpoint), str(tmp_path / "fresh.pt"),
                         tmp_path=tmp_path)


def save_checkpoint(path: Path) -> dict:
    torch.manual_seed(0)
    config = CASTVisionConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32,
                              num_segments=16, depths=[1, 1, 1], num_clusters=[6, 3], num_labels=5)
    model = CASTVisionModel(config).eval()
    classifier = CASTForImageClassification(config).eval()
    classifier.cast.load_state_dict(model.state_dict())
    processor = CASTImageProcessor(size=32, num_segments=16)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    classifier.save_pretrained(path / "classifier")
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8))
    image.save(path / "image.png")
    inputs = processor([image])
    with torch.no_grad():
        return {"pooled": model(**inputs).pooler_output, "logits": classifier(**inputs).logits,
                "superpixels": inputs["superpixels"]}


def test_checkpoint_loads_and_runs_without_the_library(tmp_path):
    expected = save_checkpoint(tmp_path / "ckpt")
    auto_map = json.loads((tmp_path / "ckpt" / "config.json").read_text())["auto_map"]
    assert auto_map == {"AutoConfig": "configuration_cast.CASTVisionConfig",
                        "AutoModel": "modeling_cast.CASTVisionModel"}
    auto_map = json.loads((tmp_path / "ckpt" / "classifier" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForImageClassification"] == "modeling_cast.CASTForImageClassification"
    processor_config = json.loads((tmp_path / "ckpt" / "preprocessor_config.json").read_text())
    assert processor_config["auto_map"] == {"AutoImageProcessor": "image_processing_cast.CASTImageProcessor"}
    written = sorted(p.name for p in (tmp_path / "ckpt").glob("*.py"))
    assert written == sorted(model_bundle("cast"))
    for name in written:
        assert filecmp.cmp(tmp_path / "ckpt" / name, REPO / "modeling" / name, shallow=False), (
            f"modeling/{name} is stale: run `hf-longclip export-code`")

    result = run_fresh(tmp_path / "ckpt", tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    loaded = torch.load(tmp_path / "fresh.pt")
    assert all(module.startswith("transformers_modules.") for module in loaded["classes"])
    assert loaded["superpixels"].equal(expected["superpixels"])
    torch.testing.assert_close(loaded["pooled"], expected["pooled"], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loaded["logits"], expected["logits"], atol=1e-6, rtol=1e-6)
    for name in written:
        assert filecmp.cmp(tmp_path / "fresh.pt.resaved" / name, REPO / "modeling" / name, shallow=False)


WITHOUT_OPENCV = """
import sys
sys.modules["hf_longclip"] = None
{block}
import numpy as np
import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoModel
checkpoint = sys.argv[1]
processor = AutoImageProcessor.from_pretrained(checkpoint, trust_remote_code=True)
model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
image = Image.open(f"{{checkpoint}}/image.png")
inputs = processor([image], superpixels=[np.arange(32 * 32).reshape(32, 32) // 64])  # computed before: no OpenCV
with torch.no_grad():
    model(**inputs)
print("loaded and ran")
processor([image])
"""


def test_missing_superpixel_package_is_named(tmp_path):
    save_checkpoint(tmp_path / "ckpt")
    result = fresh_process(WITHOUT_OPENCV.format(block=HIDE_OPENCV), str(tmp_path / "ckpt"), tmp_path=tmp_path)
    assert "loaded and ran" in result.stdout, result.stderr[-4000:]
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: ") and "CAST's superpixels" in message
    # the extra, and the packages themselves for a checkpoint's user without hf-longclip
    assert 'pip install "hf-longclip[cast]"' in message
    assert "pip install opencv-contrib-python-headless scikit-image" in message
