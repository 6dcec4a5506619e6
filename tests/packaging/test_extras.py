"""A lean install and a lean import (issue "A light model library", item 2). Each check runs in a fresh interpreter:

- `import hf_longclip` and `from hf_longclip import HiMoCLIPModel, OneLIPModel` load nothing beyond what
  `from transformers import CLIPModel` loads in the same environment but our own code, more of transformers and the
  standard library: none of the extras' packages, nor datasets, evaluate or peft (the harness's);
- with an extra's packages not installed (blocked: None in `sys.modules`), `import hf_longclip` still works and the
  feature that needs them raises one ImportError naming the extra (`pip install "hf-longclip[cast]"`).

The time of the import against transformers' is measured by benchmarks/bench_import.py, not asserted here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hf_longclip.modeling_common.optional import require

REPO = Path(__file__).resolve().parents[2]
# what the model library must not import: the extras' packages and the harness's libraries
NOT_IMPORTED = ("cv2", "skimage", "faiss", "datasets", "evaluate", "peft", "gradio", "gradio_client", "braceexpand",
                "torchdata", "matplotlib")
IMPORTS = ("import hf_longclip", "from hf_longclip import HiMoCLIPModel, OneLIPModel")

LOADED = """
import json, sys
{statement}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_modules(statement: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", LOADED.format(statement=statement)], capture_output=True,
                            text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def transformers_modules() -> set[str]:
    return loaded_modules("from transformers import CLIPModel")


@pytest.mark.parametrize("statement", IMPORTS)
def test_the_import_loads_only_our_code_beyond_transformers_clip(statement, transformers_modules):
    loaded = loaded_modules(statement)
    added = loaded - transformers_modules
    packages = {name.split(".")[0] for name in added}
    assert not packages & set(NOT_IMPORTED), f"{statement} imports {sorted(packages & set(NOT_IMPORTED))}"
    # transformers loads accelerate itself where it is installed (transformers.integrations.accelerate): the
    # baseline, not this test, decides what transformers brings
    others = packages - {"hf_longclip", "transformers"} - set(sys.stdlib_module_names)
    assert not others, f"{statement} imports packages `from transformers import CLIPModel` does not: {sorted(others)}"
    assert {"hf_longclip.models.himo_clip", "hf_longclip.models.onelip"} <= loaded


# Runs with the extra's packages blocked as if they were not installed: the library imports, `{setup}` runs
# (what needs none of them), then `{feature}` must raise ImportError, whose message is printed.
WITHOUT = """
import sys
BLOCKED = {blocked!r}
for name in BLOCKED:  # as if not installed: `import` raises ModuleNotFoundError, `importlib.util.find_spec` is None
    sys.modules[name] = None
import hf_longclip
from hf_longclip import HiMoCLIPModel, OneLIPModel
{setup}
try:
    {feature}
except ImportError as error:
    print("ImportError:", error)
else:
    print("no error")
assert not [name for name, module in sys.modules.items() if name.split(".")[0] in BLOCKED and module is not None]
"""

CASES = {
    "cast": (("cv2", "skimage"), """
import numpy as np
from PIL import Image
from hf_longclip import CASTImageProcessor
processor = CASTImageProcessor(size=32, num_segments=16)  # constructing needs no OpenCV
image = Image.new("RGB", (40, 36), "red")
given = processor(image, superpixels=np.arange(32 * 32).reshape(32, 32) // 64)  # ids computed before: none either
assert given["superpixels"].shape == (1, 32, 32)
""", "processor(image)"),
    "cast (slic)": (("cv2", "skimage"), """
from PIL import Image
from hf_longclip import CASTImageProcessor
processor = CASTImageProcessor(size=32, num_segments=16, superpixel_method="slic")
""", "processor(Image.new('RGB', (40, 36), 'red'))"),
    "mining": (("faiss",), """
import tempfile
import numpy as np
from hf_longclip.recipes.onelip.hard_negatives import HardNegativeQueues
from hf_longclip.recipes.onelip.negative_bank import NegativeBank
directory = tempfile.mkdtemp()
NegativeBank.allocate(f"{directory}/bank", np.array([0, 2, 4]), 4)
NegativeBank.seal(f"{directory}/bank", "tiny", "none")
bank = NegativeBank(f"{directory}/bank")
""", "HardNegativeQueues(bank, f'{directory}/queues', queue_size=2)"),
    "shards": (("braceexpand", "torchdata"), """
import hf_longclip.training.loop  # trains from a dataset without them
from hf_longclip.data.shards import expand_shards
""", "expand_shards('shards/{00000..00003}.tar')"),
    "shards (loader)": (("torchdata",), """
from hf_longclip.training.streaming import StreamedBatches
""", "StreamedBatches(None, None, None)"),
    "plots": (("matplotlib",), """
import tempfile
from hf_longclip.plots import plot_prefix_similarity
""", "plot_prefix_similarity({'model': [0.2, 0.3]}, tempfile.mkdtemp() + '/prefix.png', '2 images')"),
    "demo": (("gradio", "gradio_client"), """
from hf_longclip.cli import main
""", "main(['demo'])"),
    "demo (faiss)": (("faiss",), """
import torch
from hf_longclip.demo.index import ImageIndex
""", "ImageIndex('.', [], torch.zeros(0, 4))"),
}
CASES["benchmarks"] = (("mteb",), "", "__import__('hf_longclip.integrations.mteb')")
EXTRA_OF = {"cast (slic)": "cast", "shards (loader)": "shards", "demo (faiss)": "demo"}
# the pip packages the message names too, for a checkpoint's remote code where hf-longclip is not installed
PACKAGES = {"cast": "opencv-contrib-python-headless scikit-image", "mining": "faiss-cpu",
            "shards": "braceexpand torchdata", "plots": "matplotlib",
            "demo": "gradio gradio_client faiss-cpu matplotlib",
            "benchmarks": "mteb clip-benchmark webdataset pycocoevalcap"}


@pytest.mark.parametrize("case", CASES)
def test_a_missing_extra_is_named_when_its_feature_is_used(case):
    blocked, setup, feature = CASES[case]
    script = WITHOUT.format(blocked=set(blocked), setup=setup, feature=feature)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
    extra = EXTRA_OF.get(case, case)
    output = result.stdout + result.stderr
    if case == "demo":  # the command's one line, not a traceback
        assert result.returncode != 0 and "Traceback" not in result.stderr, output[-4000:]
        assert result.stderr.startswith("hf-longclip: error: "), output[-4000:]
        message = result.stderr
    else:
        assert result.returncode == 0, output[-4000:]
        message = result.stdout.strip().splitlines()[-1]
        assert message.startswith("ImportError:"), output[-4000:]
    assert f'pip install "hf-longclip[{extra}]"' in message, message
    assert message.strip().endswith(f"pip install {PACKAGES[extra]}"), message


def test_require_gives_the_module_or_one_error_naming_the_extra_and_the_packages():
    assert require("json", "cast", "unused", "anything") is json
    with pytest.raises(ImportError) as caught:
        require("no_such_module.segmentation", "cast", ("opencv-contrib-python-headless", "scikit-image"),
                "CAST's superpixels")
    assert caught.value.name == "no_such_module.segmentation"
    assert str(caught.value) == (
        "opencv-contrib-python-headless and scikit-image are needed for CAST's superpixels, and "
        "no_such_module.segmentation cannot be imported (No module named 'no_such_module'): pip install "
        "\"hf-longclip[cast]\", or the packages themselves (where hf-longclip is not installed, as for a checkpoint's "
        "remote code): pip install opencv-contrib-python-headless scikit-image")


def test_the_extras_are_what_the_docs_say():
    """Required: what loading, converting and running a model needs, and what the library is built on; the
    native and special-purpose packages are extras named for their use, `all` their union, `dev` all of it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {r.split(">")[0].split("<")[0].split("=")[0].split(";")[0].strip() for r in requirements}

    required = names(project["dependencies"])
    assert required == {"torch", "transformers", "accelerate", "datasets", "evaluate", "safetensors",
                        "huggingface_hub", "peft", "tokenizers", "numpy", "pillow", "tqdm", "filelock", "xxhash"}
    extras = {extra: names(requirements) for extra, requirements in project["optional-dependencies"].items()}
    assert extras["cast"] == {"opencv-contrib-python-headless", "scikit-image"}
    assert extras["mining"] == {"faiss-cpu"}
    assert extras["shards"] == {"braceexpand", "torchdata"}
    assert extras["plots"] == {"matplotlib"}
    assert {"gradio", "gradio_client", "hf-longclip[plots,mining]"} <= extras["demo"]
    assert extras["all"] == {"hf-longclip[cast,mining,shards,plots,demo]"}
    assert "hf-longclip[all]" in extras["dev"]
    assert extras["benchmarks"] == {"clip-benchmark", "mteb", "webdataset", "pycocoevalcap"}
    assert extras["benchmarks"] - {"clip-benchmark"} <= extras["dev"]  # clip-benchmark: --no-deps in the README
