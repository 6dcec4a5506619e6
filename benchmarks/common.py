"""Shared helpers of the benchmarks: a main-job-sized model and interleaved, median timings."""

import statistics
import time
from collections.abc import Callable

import torch
from transformers import CLIPConfig

WIDTH = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4)


def clip_config(positions: int = 248, vocab_size: int = 200) -> CLIPConfig:
    """The main job's from-scratch model: 128 wide, 2 layers, 64 px images, 248 text positions."""
    return CLIPConfig(
        text_config=dict(WIDTH, vocab_size=vocab_size, max_position_embeddings=positions,
                         bos_token_id=0, eos_token_id=1, pad_token_id=2),
        vision_config=dict(WIDTH, image_size=64, patch_size=8),
        projection_dim=128,
    )


def random_batch(batch_size: int, text_length: int, vocab_size: int = 200, image_size: int = 64) -> dict:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab_size, (batch_size, text_length), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 1
    return {"input_ids": ids, "pixel_values": torch.randn(batch_size, 3, image_size, image_size, generator=generator)}


def compare(candidates: dict[str, Callable[[], None]], repeats: int, warmup: int = 2,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds per call of each candidate, run interleaved (order flipped every round) so that drifts in
    machine load and allocator state hit all alike; `clock`: `time.process_time` counts the process's CPU seconds
    (all its threads), which other jobs on a shared machine do not inflate."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in candidates}
    for round_index in range(repeats):
        order = list(candidates.items())
        for name, fn in order if round_index % 2 == 0 else reversed(order):
            start = clock()
            fn()
            times[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in times.items()}
