"""The benchmark registry (`BENCHMARKS`, filled by each loader module's `_register`), the loaded `Benchmark` and
the sample schema's fields and features."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import datasets

SCHEMA_FIELDS = ("id", "image", "images", "caption", "captions", "sentences", "subtexts", "levels", "image_id",
                 "boxes", "sentids", "cxc_images", "cxc_texts", "cxc_caption_positives")

IMAGE = datasets.Image(mode="RGB")
TEXT = datasets.Value("string")
TEXTS = datasets.List(TEXT)
BASE_FEATURES = {"id": TEXT, "image": IMAGE, "caption": TEXT, "sentences": TEXTS}

PathLike = str | os.PathLike


def dataset_fields(dataset: datasets.Dataset) -> frozenset[str]:
    """The schema fields (see `hf_longclip.data.benchmarks`) among ``dataset``'s columns; works for any dataset."""
    return frozenset(name for name in dataset.column_names if name in SCHEMA_FIELDS)


@dataclass
class Benchmark:
    """A loaded benchmark: ``dataset`` rows in the schema, plus what was dropped while loading."""

    name: str
    dataset: datasets.Dataset
    num_skipped: int = 0
    split: str | None = None
    source: str = ""  # the annotation file (or directory) the rows were read from
    skipped_paths: list[str] = field(default_factory=list)  # the unreadable image of each skipped record

    @property
    def fields(self) -> frozenset[str]:
        return dataset_fields(self.dataset)

    def __len__(self) -> int:
        return len(self.dataset)


@dataclass(frozen=True)
class BenchmarkSpec:
    """A registry entry; calling it calls its loader: ``BENCHMARKS[name](data_dir, split, max_samples, ...)``."""

    name: str
    load: Callable[..., Benchmark]
    fields: frozenset[str]
    splits: tuple[str, ...]
    default_split: str
    description: str

    def __call__(self, data_dir: PathLike, split: str | None = None, max_samples: int | None = None,
                 **options) -> Benchmark:
        return self.load(data_dir, split, max_samples, **options)


BENCHMARKS: dict[str, BenchmarkSpec] = {}


def load_benchmark(name: str, data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                   annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                   num_workers: int | None = None) -> Benchmark:
    """Load benchmark ``name`` (a key of ``BENCHMARKS``) from ``data_dir``; see `hf_longclip.data.benchmarks`."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(sorted(BENCHMARKS))}")
    return BENCHMARKS[name](data_dir, split, max_samples, annotation_file=annotation_file, image_root=image_root,
                            num_workers=num_workers)


def schema_fields(benchmark: str | Benchmark | datasets.Dataset) -> frozenset[str]:
    """Schema fields provided by a benchmark name (declared, no data read), a loaded `Benchmark` or a dataset."""
    if isinstance(benchmark, str):
        if benchmark not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {benchmark!r}; choose one of {', '.join(sorted(BENCHMARKS))}")
        return BENCHMARKS[benchmark].fields
    if isinstance(benchmark, Benchmark):
        return benchmark.fields
    return dataset_fields(benchmark)


def _register(name: str, features: dict, splits: Sequence[str], description: str):
    def decorator(load):
        BENCHMARKS[name] = BenchmarkSpec(name=name, load=load, fields=frozenset(features), splits=tuple(splits),
                                         default_split=splits[0], description=description)
        load.features = datasets.Features(features)
        return load
    return decorator


def describe_benchmarks() -> Iterable[str]:
    """One line per registered benchmark (name, splits, fields, description), e.g. for ``--help`` texts."""
    for name, spec in sorted(BENCHMARKS.items()):
        yield (f"{name}: {spec.description} [splits: {', '.join(spec.splits)}; "
               f"fields: {', '.join(sorted(spec.fields))}]")
