"""Nothing runs, nothing is lost (docs/safety.md): code shipped with a checkpoint runs only when the user passes
`trust_remote_code` (each entry point that loads a name, the published bundles included) while the library's own model
types load without it; a training run never deletes checkpoints it was not told to, and a resume whose arguments
differ from the checkpoint's is refused, naming them."""

import json
import logging
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoProcessor

from helpers.builders import tiny_clip, tiny_himo, tiny_processor
from helpers.fresh_process import run_python_offline
from hf_longclip import DITMModel, HiMoCLIPModel, OneLIPModel
from hf_longclip.cli import main
from hf_longclip.evaluation import load_model
from hf_longclip.miniature import BackboneArguments
from hf_longclip.training.arguments import FREE_ON_RESUME, LoopArguments
from hf_longclip.training.checkpoint import STATE_FILE, list_checkpoints
from hf_longclip.training.loop import train
from hf_longclip.training.lora import LoraArguments
from hf_longclip.training.runs import HubArguments, check_output_dir, load_clip, train_variants
from hf_longclip.training.task import Task

REPO = Path(__file__).resolve().parents[2]


def marked_checkpoint(directory: Path, marker: Path) -> Path:
    """A tiny CLIP checkpoint of a type of its own, `marked_clip`, whose code (shipped beside the weights, mapped by
    config.json's `auto_map`) writes `marker` when imported."""
    tiny_clip().save_pretrained(directory)
    tiny_processor(77).save_pretrained(directory)
    (directory / "marked_clip.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import CLIPConfig, CLIPModel\n\n\n"
        "class MarkedConfig(CLIPConfig):\n    model_type = 'marked_clip'\n\n\n"
        "class MarkedModel(CLIPModel):\n    config_class = MarkedConfig\n")
    config = json.loads((directory / "config.json").read_text())
    config.update(model_type="marked_clip",
                  auto_map={"AutoConfig": "marked_clip.MarkedConfig", "AutoModel": "marked_clip.MarkedModel"})
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture
def marked(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "marker"
    return marked_checkpoint(tmp_path / "marked", marker), marker


@pytest.mark.parametrize("load", [
    lambda path: HiMoCLIPModel.from_clip(str(path)),
    lambda path: DITMModel.from_clip(str(path)),
    lambda path: OneLIPModel.from_clip(str(path)),
    lambda path: load_model(str(path), "cpu"),
], ids=["HiMoCLIPModel.from_clip", "DITMModel.from_clip", "OneLIPModel.from_clip", "load_model"])
def test_a_checkpoints_code_does_not_run_by_default(marked, load):
    checkpoint, marker = marked
    with pytest.raises(ValueError, match="trust_remote_code"):
        load(checkpoint)
    assert not marker.exists()


def test_the_scripts_loader_and_the_cli_refuse_it_naming_their_flag(marked, capsys):
    checkpoint, marker = marked
    with pytest.raises(SystemExit, match="--trust_remote_code"):  # --init_from_clip, --base_checkpoint
        load_clip(str(checkpoint))
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(checkpoint), "--dataset", "synthetic", "--max-samples", "2"])
    assert exit_info.value.code == 2 and "--trust-remote-code" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.slow
def test_the_opt_in_runs_it_also_in_the_published_bundle(tmp_path):
    """In a fresh process (its own modules cache): first `from_clip` of the code a HiMo-CLIP checkpoint ships, loaded
    before the library is imported, refuses a marked checkpoint unless told, then runs its code; then each entry point
    of the library runs it when told (each on its own copy: a module is imported once)."""
    names = ("bundle", "cli", "from_clip", "load_clip", "load_model")
    paths = {name: str(marked_checkpoint(tmp_path / f"marked_{name}", tmp_path / f"ran_{name}")) for name in names}
    tiny_himo().save_pretrained(tmp_path / "himo")
    script = f"""
import json, sys
from pathlib import Path
from transformers import AutoModel
paths, ran = {paths!r}, Path({str(tmp_path)!r})
bundle_class = type(AutoModel.from_pretrained({str(tmp_path / "himo")!r}, trust_remote_code=True))
try:
    bundle_class.from_clip(paths["bundle"])
    refused = False
except ValueError as error:
    refused = "trust_remote_code" in str(error)
report = dict(bundle=bundle_class.__module__, library_imported="hf_longclip" in sys.modules, refused=refused,
              ran_before=(ran / "ran_bundle").exists())
bundle_class.from_clip(paths["bundle"], trust_remote_code=True)
from hf_longclip import HiMoCLIPModel
from hf_longclip.cli import main
from hf_longclip.evaluation import load_model
from hf_longclip.training.runs import load_clip
main(["eval", "--model", paths["cli"], "--trust-remote-code", "--dataset", "synthetic", "--max-samples", "2",
      "--tasks", "retrieval", "--output-dir", "eval", "--data-dir", "scenes"])
models = [HiMoCLIPModel.from_clip(paths["from_clip"], trust_remote_code=True),
          load_clip(paths["load_clip"], trust_remote_code=True), load_model(paths["load_model"], "cpu", True)[0]]
report["types"] = [type(model).__name__ for model in models]
print(json.dumps(report))
"""
    report = run_python_offline(script, tmp_path)
    assert report["bundle"].startswith("transformers_modules.") and not report["library_imported"]
    assert report["refused"] and not report["ran_before"]
    assert report["types"] == ["HiMoCLIPModel", "MarkedModel", "MarkedModel"]
    assert all((tmp_path / f"ran_{name}").read_text() == "ran" for name in names)


def test_the_library_types_load_without_it_and_never_run_their_shipped_code(tmp_path):
    """A HiMo-CLIP checkpoint whose shipped modeling file is altered to write a marker: without trust_remote_code it
    loads through the classes `import hf_longclip` registered, and the shipped code never runs."""
    marker = tmp_path / "marker"
    checkpoint = tmp_path / "himo"
    tiny_himo().save_pretrained(checkpoint)
    tiny_processor().save_pretrained(checkpoint)
    modeling = checkpoint / "modeling_himo_clip.py"
    modeling.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n" + modeling.read_text())
    assert type(AutoModel.from_pretrained(checkpoint)) is HiMoCLIPModel
    assert type(load_model(str(checkpoint), "cpu")[0]) is HiMoCLIPModel
    assert type(load_clip(str(checkpoint))) is HiMoCLIPModel
    assert type(OneLIPModel.from_clip(str(checkpoint))) is OneLIPModel
    assert type(AutoProcessor.from_pretrained(checkpoint)).__module__.startswith("hf_longclip.")
    assert not marker.exists()


# --- resume never deletes, and refuses changed arguments ------------------------------------------------------------


class LinearTask(Task):
    """A one-layer regression: the smallest task the loop trains and checkpoints."""

    def __init__(self):
        torch.manual_seed(0)
        super().__init__(torch.nn.Linear(2, 1), collate_fn=lambda rows: {"x": torch.tensor(rows, dtype=torch.float)})

    def compute_loss(self, model, batch):
        return {"loss": model(batch["x"]).pow(2).mean()}


ROWS = [[float(i), 1.0] for i in range(16)]


def loop_args(tmp_path, **overrides) -> LoopArguments:
    settings = dict(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=2, checkpointing_steps=1,
                    save_total_limit=0, warmup_steps=0, logging_steps=1)
    return LoopArguments(**{**settings, **overrides})


def run_loop(accelerator, args: LoopArguments, run_name: str = "run", run_arguments=None):
    """`train` a fresh LinearTask, then free the accelerator for the next run (as `train_variants` does)."""
    try:
        return train(LinearTask(), ROWS, args, accelerator, run_name=run_name, run_arguments=run_arguments)
    finally:
        accelerator.free_memory()


def checkpoint_files(tmp_path) -> dict[str, bytes]:
    return {str(path.relative_to(tmp_path)): path.read_bytes()
            for path in sorted((tmp_path / "checkpoints").rglob("*")) if path.is_file()}


@pytest.fixture
def trained(accelerator, tmp_path) -> dict[str, bytes]:
    """A finished run of 4 steps with a checkpoint at each: {file: bytes} of its checkpoints."""
    run_loop(accelerator, loop_args(tmp_path), "run", {"queue_size": 4})
    assert len(list_checkpoints(tmp_path / "checkpoints" / "run")) == 4
    return checkpoint_files(tmp_path)


def test_a_run_over_checkpoints_without_resume_refuses_and_deletes_nothing(accelerator, tmp_path, trained):
    with pytest.raises(ValueError, match="holds 4 checkpoint.*--resume_from_checkpoint latest.*--overwrite_output_dir"):
        run_loop(accelerator, loop_args(tmp_path), "run")
    assert checkpoint_files(tmp_path) == trained
    run_loop(accelerator, loop_args(tmp_path, max_steps=2, overwrite_output_dir=True), "run")
    assert [path.name for path in list_checkpoints(tmp_path / "checkpoints" / "run")] == ["step_00000001",
                                                                                          "step_00000002"]


def test_latest_without_a_valid_checkpoint_stops(accelerator, tmp_path, trained):
    for path in list_checkpoints(tmp_path / "checkpoints" / "run"):
        (path / STATE_FILE).unlink()
    damaged = checkpoint_files(tmp_path)
    with pytest.raises(ValueError, match="no valid checkpoint in .*step_00000004: no trainer_state.json.*Nothing was "
                                         "deleted"):
        run_loop(accelerator, loop_args(tmp_path, resume_from_checkpoint="latest"), "run")
    assert checkpoint_files(tmp_path) == damaged
    # a run that never wrote a checkpoint starts under `latest` (a multi-run script resumes its unstarted runs)
    run_loop(accelerator, loop_args(tmp_path, resume_from_checkpoint="latest"), "other")


@pytest.mark.parametrize("changes, named", [
    (dict(per_device_train_batch_size=4), "per_device_train_batch_size=2 -> 4"),
    (dict(seed=1, learning_rate=1e-3), "learning_rate=0.0005 -> 0.001, seed=0 -> 1"),
    (dict(run_arguments={"queue_size": 8}), "queue_size=4 -> 8"),
    (dict(run_arguments={}), "queue_size=4 -> '(absent)'"),
])
def test_a_resume_with_arguments_that_shape_the_run_changed_is_refused(accelerator, tmp_path, trained, changes,
                                                                          named, caplog):
    changes = dict(changes)
    run_arguments = changes.pop("run_arguments", {"queue_size": 4})
    args = loop_args(tmp_path, resume_from_checkpoint="latest", max_steps=5, **changes)
    with pytest.raises(ValueError, match=f"arguments that shape the run differ.*{re.escape(named)}.*--allow_changed"):
        run_loop(accelerator, args, "run", run_arguments)
    assert checkpoint_files(tmp_path) == trained
    allowed = loop_args(tmp_path, resume_from_checkpoint="latest", max_steps=5, allow_changed_arguments=True,
                        **changes)
    with caplog.at_level(logging.WARNING):
        _, history = run_loop(accelerator, allowed, "run", run_arguments)
    assert named in caplog.text and "resuming anyway" in caplog.text
    assert [record["step"] for record in history] == [1, 2, 3, 4, 5]


def test_a_longer_run_and_other_logging_resume(accelerator, tmp_path, trained, caplog):
    """The arguments of `FREE_ON_RESUME` (here: more steps, logging, checkpointing, evaluation batch) may change."""
    args = loop_args(tmp_path, resume_from_checkpoint="latest", max_steps=6, logging_steps=3, checkpointing_steps=3,
                     per_device_eval_batch_size=7, save_total_limit=2)
    with caplog.at_level(logging.WARNING):
        _, history = run_loop(accelerator, args, "run", {"queue_size": 4})
    assert [record["step"] for record in history] == [1, 2, 3, 4, 6] and "differ" not in caplog.text


def test_free_arguments_are_arguments():
    """Every name of FREE_ON_RESUME is a flag of the loop, the shared argument groups or a script."""
    import dataclasses
    import importlib.util

    names = {field.name for group in (LoopArguments, BackboneArguments, LoraArguments, HubArguments)
             for field in dataclasses.fields(group)}
    for script in sorted((REPO / "examples").glob("train_*.py")):
        spec = importlib.util.spec_from_file_location(script.stem, script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        names |= {field.name for field in dataclasses.fields(module.ScriptArguments)}
    assert FREE_ON_RESUME <= names, sorted(FREE_ON_RESUME - names)


def test_scripts_stop_before_any_work(accelerator, tmp_path, trained):
    """`start_run`'s check over the whole output directory: the same refusals, as a clean exit."""
    from hf_longclip.training.arguments import run_signature

    def check(args, run_arguments):
        check_output_dir(args, run_signature(args, 1, run_arguments)["run"])

    with pytest.raises(SystemExit, match="holds 4 checkpoint"):
        check(loop_args(tmp_path), {"queue_size": 4})
    with pytest.raises(SystemExit, match="queue_size=4 -> 8"):
        check(loop_args(tmp_path, resume_from_checkpoint="latest"), {"queue_size": 8})
    check(loop_args(tmp_path, resume_from_checkpoint="latest"), {"queue_size": 4, "variants": "other,rows"})
    check(loop_args(tmp_path, overwrite_output_dir=True), {"queue_size": 8})


def test_a_finished_run_is_reused_only_with_its_arguments(accelerator, tmp_path):
    """`train_variants` skips a variant whose evaluation is written when resuming, unless its arguments changed."""
    from hf_longclip.training.arguments import run_signature
    from hf_longclip.training.runs import LENGTH, run_length

    def run(**overrides):
        return train_variants(accelerator, ["row"], lambda _: (LinearTask(), None), lambda model, processor: {},
                              {"train": ROWS, "validation": ROWS}, loop_args(tmp_path, **overrides), LoraArguments(),
                              run_args={"queue_size": 4})

    finished = loop_args(tmp_path, resume_from_checkpoint="latest")
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "row.json").write_text(json.dumps(
        {"results": {"r1": 1.0}, "history": [], "arguments": run_signature(finished, 1, {"queue_size": 4}),
         LENGTH: run_length(finished)}))
    assert run(resume_from_checkpoint="latest")[0] == {"row": {"r1": 1.0}}
    with pytest.raises(ValueError, match="cannot reuse the finished row.*per_device_train_batch_size=2 -> 4"):
        run(resume_from_checkpoint="latest", per_device_train_batch_size=4)
