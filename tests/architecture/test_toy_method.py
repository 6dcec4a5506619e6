"""A method is one model folder and one recipes folder: a toy method added to a copy of the package through exactly
those two folders (what docs/contributing.md walks through) is registered with transformers' Auto classes, listed
and planned by `hf-longclip plan`, and trained by the shared loop from its spec alone, each in a fresh process that
imports the copy."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hf_longclip

TOY_MODEL = {
    "__init__.py": '''
        """A toy dual encoder: mean token embeddings against a linear map of the pixels."""

        from .configuration_toy import ToyConfig
        from .modeling_toy import ToyModel

        AUTO_CLASSES = {"AutoConfig": ToyConfig, "AutoModel": ToyModel}
        ''',
    "configuration_toy.py": '''
        from transformers import PretrainedConfig


        class ToyConfig(PretrainedConfig):
            model_type = "hf_longclip_toy"

            def __init__(self, vocab_size=1000, image_size=32, hidden_size=16, **kwargs):
                super().__init__(**kwargs)
                self.vocab_size, self.image_size, self.hidden_size = vocab_size, image_size, hidden_size
        ''',
    "modeling_toy.py": '''
        from dataclasses import dataclass

        import torch
        from torch import nn
        from transformers import PreTrainedModel
        from transformers.utils import ModelOutput

        from .configuration_toy import ToyConfig


        @dataclass
        class ToyOutput(ModelOutput):
            image_embeds: torch.Tensor | None = None
            text_embeds: torch.Tensor | None = None
            logit_scale: torch.Tensor | None = None


        class ToyModel(PreTrainedModel):
            config_class = ToyConfig

            def __init__(self, config):
                super().__init__(config)
                self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
                self.pixels = nn.Linear(3 * config.image_size**2, config.hidden_size)
                self.logit_scale = nn.Parameter(torch.tensor([2.6592]))
                self.post_init()

            def forward(self, input_ids, pixel_values, attention_mask=None, **kwargs):
                mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
                text = (self.tokens(input_ids) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
                image = self.pixels(pixel_values.flatten(1))
                return ToyOutput(image_embeds=nn.functional.normalize(image, dim=-1),
                                 text_embeds=nn.functional.normalize(text, dim=-1), logit_scale=self.logit_scale.exp())
        ''',
}
TOY_RECIPE = {
    "__init__.py": '''
        """What trains the toy: CLIP's loss over its embeddings."""

        from hf_longclip.recipes.toy.method import METHODS

        __all__ = ["METHODS"]
        ''',
    "method.py": '''
        from hf_longclip.models.toy import ToyConfig, ToyModel
        from hf_longclip.objectives import ClipLoss
        from hf_longclip.recipes.registry import Method
        from hf_longclip.training.task import ContrastiveTask


        def build(size, options):
            model = ToyModel(ToyConfig(vocab_size=size.vocab_size, image_size=size.image_size,
                                       hidden_size=size.projection_dim))
            return model, ContrastiveTask(model, None, ClipLoss())


        def example_batch(size, rows, inputs, options):
            return {**inputs.texts(rows, 12), "pixel_values": inputs.images(rows)}


        METHODS = (Method("toy", "a toy dual encoder under CLIP's loss", build, example_batch),)
        ''',
}
TRAIN = '''
    import json, sys
    from accelerate import Accelerator
    from datasets import Dataset
    from hf_longclip.recipes.registry import SIZES, BuildOptions, PlaceholderInputs, method
    from hf_longclip.training.arguments import LoopArguments
    from hf_longclip.training.loop import train

    spec, size, options = method("toy"), SIZES["tiny"], BuildOptions()
    model, task = spec.build(size, options)
    task.collate_fn = lambda rows: spec.example_batch(size, len(rows), PlaceholderInputs(size), options)
    args = LoopArguments(output_dir=sys.argv[1], max_steps=2, per_device_train_batch_size=4, logging_steps=1,
                         report_to="none")
    _, history = train(task, Dataset.from_dict({"row": list(range(8))}), args, Accelerator(cpu=True), "toy")
    print(json.dumps({"class": type(model).__name__, "steps": [record["step"] for record in history],
                      "losses": [record["loss"] for record in history]}))
    '''


def write_folder(folder: Path, files: dict) -> None:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture(scope="module")
def package_with_toy(tmp_path_factory) -> Path:
    """A copy of the installed package, plus the toy's model folder and recipes folder: nothing else touched."""
    root = tmp_path_factory.mktemp("toy") / "src"
    package = root / "hf_longclip"
    shutil.copytree(Path(hf_longclip.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    write_folder(package / "models" / "toy", TOY_MODEL)
    write_folder(package / "recipes" / "toy", TOY_RECIPE)
    return root


def run(root: Path, *args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
                               "HOME": str(root.parent)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_toy_registers_with_auto_classes(package_with_toy):
    code = ("import hf_longclip, transformers\n"
            "assert hf_longclip.__file__.startswith(%r)\n"
            "config = transformers.AutoConfig.for_model('hf_longclip_toy')\n"
            "print(type(transformers.AutoModel.from_config(config)).__name__)") % str(package_with_toy)
    assert run(package_with_toy, "-c", code).strip() == "ToyModel"


def test_the_cli_lists_and_plans_the_toy(package_with_toy):
    shown = run(package_with_toy, "-m", "hf_longclip.cli", "plan", "--help")
    assert "  toy: a toy dual encoder under CLIP's loss" in shown
    plan = run(package_with_toy, "-m", "hf_longclip.cli", "plan", "--method", "toy", "--size", "tiny", "--target",
               "cpu")
    assert plan.startswith("toy at tiny") and "largest batch per process that fits" in plan


def test_the_loop_trains_the_toy_from_its_spec(package_with_toy, tmp_path):
    script = tmp_path / "train_toy.py"
    script.write_text(textwrap.dedent(TRAIN))
    result = json.loads(run(package_with_toy, str(script), str(tmp_path / "out")).strip().splitlines()[-1])
    assert result["class"] == "ToyModel" and result["steps"] == [1, 2]
    assert all(0 < loss < 10 for loss in result["losses"])  # CLIP's loss over 4 pairs: about ln 4 at the start


def test_without_the_toy_the_registry_is_the_package_s():
    """The same registry in this process (the installed package) has no toy: the copy above is what added it."""
    from hf_longclip.recipes.registry import method_names

    assert "toy" not in method_names() and {"himo", "onelip", "ditm", "fcast", "cast"} <= set(method_names())
