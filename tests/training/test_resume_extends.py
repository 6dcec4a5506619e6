"""A resume extends a finished run and never loses one: `--resume_from_checkpoint latest` with a larger
`--max_steps` trains a finished variant on from its last checkpoint (saying so, the schedule recomputed for the new
length), refuses where it kept no checkpoint or where the run would shorten; a rerun over finished variants refuses
unless `--overwrite_output_dir`."""

import json
import logging

import pytest
import torch
from safetensors.torch import load_file

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.lora import LoraArguments
from hf_longclip.training.runs import train_variants

ROWS = [{"image": image, "caption": caption} for image, caption in zip(random_images(len(CAPTIONS)), CAPTIONS)]


def run(accelerator, tmp_path, **overrides):
    settings = dict(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=len(ROWS), warmup_steps=0,
                    logging_steps=1, learning_rate=1e-2)
    args = LoopArguments(**{**settings, **overrides})
    try:
        return train_variants(accelerator, ["row"], lambda _: (HiMoCLIPTask(tiny_himo(), ImageTextCollator(
            tiny_processor())), None), lambda model, processor: {"r1": 1.0}, {"train": ROWS, "validation": ROWS},
            args, LoraArguments())
    finally:
        accelerator.free_memory()


def saved(tmp_path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((tmp_path / "row").iterdir()) if path.is_file()}


def test_a_finished_run_trains_on_when_resumed_longer(accelerator, tmp_path, capsys, caplog):
    run(accelerator, tmp_path, checkpointing_steps=1)
    two_steps = load_file(tmp_path / "row" / "model.safetensors")
    _, histories = run(accelerator, tmp_path, checkpointing_steps=1, resume_from_checkpoint="latest")
    assert "finished in an earlier run, skipped" in capsys.readouterr().out  # the same length: reused
    with caplog.at_level(logging.WARNING):
        _, histories = run(accelerator, tmp_path, checkpointing_steps=1, resume_from_checkpoint="latest", max_steps=4)
    out = capsys.readouterr().out
    assert "row: finished in an earlier run and --max_steps 2 -> --max_steps 4: training on" in out
    assert "length changed from 2 to 4 steps" in caplog.text and "no new warmup" in caplog.text
    assert [record["step"] for record in histories["row"]] == [1, 2, 3, 4]  # the earlier history kept
    four_steps = load_file(tmp_path / "row" / "model.safetensors")
    assert not torch.equal(four_steps["logit_scale"], two_steps["logit_scale"])
    assert json.loads((tmp_path / "eval" / "row.json").read_text())["length"] == {"max_steps": 4}
    with pytest.raises(ValueError, match="at step 4, past this run's 3 steps.*not shorten"):
        run(accelerator, tmp_path, checkpointing_steps=1, resume_from_checkpoint="latest", max_steps=3)


def test_a_finished_run_without_checkpoints_is_never_overwritten_silently(accelerator, tmp_path):
    run(accelerator, tmp_path)  # --checkpointing_steps 0, the default
    before = saved(tmp_path)
    with pytest.raises(SystemExit, match="holds row, finished in an earlier run.*--resume_from_checkpoint latest.*"
                                         "--overwrite_output_dir"):
        run(accelerator, tmp_path)
    with pytest.raises(SystemExit, match="kept no valid checkpoint.*cannot train on.*--overwrite_output_dir"):
        run(accelerator, tmp_path, resume_from_checkpoint="latest", max_steps=4)
    assert saved(tmp_path) == before
    _, histories = run(accelerator, tmp_path, overwrite_output_dir=True, max_steps=3)
    assert [record["step"] for record in histories["row"]] == [1, 2, 3] and saved(tmp_path) != before
