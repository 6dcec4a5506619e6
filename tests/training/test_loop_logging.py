"""What the shared loop records: every term of the objective, each the mean over its logging window, from step 1."""

import logging

import pytest
import torch

from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import train
from hf_longclip.training.task import Task


class CountingTask(Task):
    """Call k returns terms a_loss = k and b_loss = 10 k (plus a zero that carries a gradient)."""

    def __init__(self):
        super().__init__(torch.nn.Linear(2, 1), collate_fn=lambda rows: {"x": torch.tensor(rows, dtype=torch.float)})
        self.calls = 0

    def compute_loss(self, model, batch):
        self.calls += 1
        zero = model(batch["x"]).sum() * 0
        return {"a_loss": zero + self.calls, "b_loss": zero + 10.0 * self.calls}


def test_history_holds_each_term_averaged_over_its_logging_window(accelerator, tmp_path, caplog):
    args = LoopArguments(output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=2, logging_steps=3,
                         warmup_steps=0)
    with caplog.at_level(logging.INFO, logger="hf_longclip"):
        _, history = train(CountingTask(), [[0.0, 1.0]] * 10, args, accelerator, run_name="counting")
    assert [record["step"] for record in history] == [1, 3, 5]  # step 1, every 3rd, the last
    # windows: step 1 alone, steps 2-3, steps 4-5
    assert [record["a_loss"] for record in history] == [1.0, 2.5, 4.5]
    assert [record["b_loss"] for record in history] == [10.0, 25.0, 45.0]
    assert [record["loss"] for record in history] == pytest.approx([11.0, 27.5, 49.5])
    assert "counting step 3/5" in caplog.text  # records reach the log at info level
