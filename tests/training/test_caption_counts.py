"""The training log counts the captions the processor cut to the model's length and by how much: cumulative fields
of the history (`texts_truncated`, `text_tokens_cut`) and one line at the end of the run."""

import logging
from dataclasses import dataclass

import torch

from helpers.builders import CAPTIONS, tiny_processor
from hf_longclip.training.arguments import LoopArguments
from hf_longclip.training.loop import train
from hf_longclip.training.task import Task

LONG = " ".join(CAPTIONS)


@dataclass
class TextCollator:
    processor: object

    def __call__(self, rows: list[str]) -> dict:
        return dict(self.processor(text=rows, padding="longest"))


class TextTask(Task):
    def __init__(self, processor):
        super().__init__(torch.nn.Embedding(128, 1), collate_fn=TextCollator(processor))

    def compute_loss(self, model, batch):
        return {"a_loss": model(batch["input_ids"]).mean()}


def test_the_history_and_one_log_line_count_the_cut_captions(accelerator, tmp_path, caplog):
    processor = tiny_processor(max_length=24)
    cut = len(processor.tokenizer(LONG)["input_ids"]) - 24
    args = LoopArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=2, logging_steps=2,
                         warmup_steps=0)
    with caplog.at_level(logging.INFO, logger="hf_longclip"):
        _, history = train(TextTask(processor), ["a red circle.", LONG] * 4, args, accelerator, run_name="texts")
    assert [record["texts_truncated"] for record in history][-1] == 4  # one epoch: each long caption once
    assert history[-1]["text_tokens_cut"] == 4 * cut
    assert all(record["texts_truncated"] <= 4 for record in history)
    assert f"texts: 4 of 8 training texts cut at 24 tokens: {4 * cut} tokens lost in all" in caplog.text
    assert caplog.text.count("training texts cut") == 1  # once per run, not per batch
