"""The datasets `hf-longclip eval` and `hf-longclip shard` load by name: the generated "synthetic" scenes, or a
benchmark of `hf_longclip.data.benchmarks` read from its files under a data directory."""

from __future__ import annotations

from ..metrics.zero_shot import DEFAULT_TEMPLATES
from .benchmarks import BENCHMARKS, Benchmark, load_benchmark
from .synthetic import CLASS_TEMPLATES, CLASSNAMES, load_synthetic_scenes

SYNTHETIC = "synthetic"


def dataset_names() -> list[str]:
    """Every name `load_eval_dataset` takes: "synthetic", then the benchmarks in alphabetical order."""
    return [SYNTHETIC, *sorted(BENCHMARKS)]


def check_data_dir(name: str, data_dir: str | None, protocol: str | None = None) -> str | None:
    """Every benchmark but the generated "synthetic" one reads its files from `data_dir`, laid out as `protocol`;
    returns the protocol's name (None: the default one; "synthetic" has none)."""
    if name == SYNTHETIC:
        if protocol is not None:
            raise ValueError(f"the {SYNTHETIC!r} scenes have no protocols (got {protocol!r})")
        return None
    if data_dir is None:
        raise ValueError(f"--data-dir is required for the {name!r} benchmark")
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(dataset_names())}")
    return BENCHMARKS[name].protocol(protocol).name


def load_eval_benchmark(name: str, data_dir: str | None = None, split: str | None = None,
                        max_samples: int | None = None, protocol: str | None = None) -> Benchmark:
    """The `Benchmark` `load_eval_dataset` reads (rows, split, the records skipped: `num_skipped`, `skipped` by
    reason, `skipped_paths`; "synthetic": generated, nothing skipped)."""
    protocol = check_data_dir(name, data_dir, protocol)
    if name == SYNTHETIC:
        split = split or "test"
        dataset = load_synthetic_scenes(cache_dir=data_dir)[split]
        if max_samples is not None:
            dataset = dataset.select(range(min(max_samples, len(dataset))))
        return Benchmark(name=SYNTHETIC, dataset=dataset, split=split, source=SYNTHETIC, templates=CLASS_TEMPLATES,
                         skipped={"count": 0, "by_reason": {}, "examples": []})
    return load_benchmark(name, data_dir, split=split, max_samples=max_samples, protocol=protocol)


def load_eval_dataset(name: str, data_dir: str | None = None, split: str | None = None,
                      max_samples: int | None = None, protocol: str | None = None):
    """(dataset, the split it is, number of skipped corrupt images, zero-shot class names and templates) for a
    benchmark name:
    one of `hf_longclip.data.benchmarks.BENCHMARKS` (files under `data_dir`, laid out and read as `protocol`, a key
    of its ``protocols``; default the first) or "synthetic" (generated; `data_dir` is then its cache). Class names
    None: those of the rows' ``label`` ClassLabel (an image folder's)."""
    benchmark = load_eval_benchmark(name, data_dir, split, max_samples, protocol)
    return (benchmark.dataset, benchmark.split, benchmark.num_skipped, CLASSNAMES if name == SYNTHETIC else None,
            benchmark.templates or DEFAULT_TEMPLATES)
