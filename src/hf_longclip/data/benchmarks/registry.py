"""The benchmark registry (`BENCHMARKS`, filled by each loader module's `_register` and `_protocol`), the loaded
`Benchmark` and the sample schema's fields and features."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import datasets

SCHEMA_FIELDS = ("id", "image", "images", "caption", "captions", "sentences", "subtexts", "levels", "image_id",
                 "boxes", "sentids", "cxc_images", "cxc_texts", "cxc_caption_positives", "label")

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
    skipped: dict = field(default_factory=dict)  # their count by reason and the first ones (`SkippedSamples.summary`)
    protocol: str = ""  # the protocol (file layout and reading) the rows were read with
    templates: tuple[str, ...] | None = None  # zero-shot prompt templates, for benchmarks with a `label` column

    @property
    def fields(self) -> frozenset[str]:
        return dataset_fields(self.dataset)

    def __len__(self) -> int:
        return len(self.dataset)


class LayoutNotFoundError(FileNotFoundError):
    """A benchmark's file or folder is missing: ``problem`` names the paths tried, ``layout`` the tree expected."""

    def __init__(self, problem: str, layout: str):
        super().__init__(f"{problem}\n{layout}")
        self.problem, self.layout = problem, layout


@dataclass(frozen=True)
class Protocol:
    """One way a benchmark is laid out on disk and read: the files of a paper's own evaluation code."""

    name: str
    load: Callable[..., Benchmark]
    layout: str  # the expected tree under the data directory, one path per line
    description: str
    splits: tuple[str, ...]


@dataclass(frozen=True)
class BenchmarkSpec:
    """A registry entry; calling it calls a protocol's loader:
    ``BENCHMARKS[name](data_dir, split, max_samples, protocol=None, ...)`` (``None``: the first protocol)."""

    name: str
    load: Callable[..., Benchmark]
    fields: frozenset[str]
    splits: tuple[str, ...]
    default_split: str
    description: str
    protocols: dict[str, Protocol] = field(default_factory=dict)  # the first is the default

    @property
    def default_protocol(self) -> str:
        return next(iter(self.protocols))

    def protocol(self, name: str | None) -> Protocol:
        """The protocol ``name`` (``None``: the default), or a ``ValueError`` listing the valid ones."""
        if name is None:
            return self.protocols[self.default_protocol]
        if name not in self.protocols:
            raise ValueError(f"{self.name}: unknown protocol {name!r}; expected one of {', '.join(self.protocols)}")
        return self.protocols[name]

    def __call__(self, data_dir: PathLike, split: str | None = None, max_samples: int | None = None,
                 protocol: str | None = None, **options) -> Benchmark:
        chosen = self.protocol(protocol)
        try:
            benchmark = chosen.load(data_dir, split, max_samples, **options)
        except FileNotFoundError as error:
            others = [name for name in self.protocols if name != chosen.name]
            hint = (f"\nother protocols: {', '.join(others)} (--protocol; see `hf-longclip eval --help`)"
                    if others else "")
            raise LayoutNotFoundError(str(error), f"expected layout of {self.name}, protocol {chosen.name} "
                                                  f"({chosen.description}):\n{_indent(chosen.layout)}{hint}") from None
        benchmark.protocol = chosen.name
        return benchmark


BENCHMARKS: dict[str, BenchmarkSpec] = {}


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def load_benchmark(name: str, data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                   protocol: str | None = None, annotation_file: PathLike | None = None,
                   image_root: PathLike | None = None, num_workers: int | None = None) -> Benchmark:
    """Load benchmark ``name`` (a key of ``BENCHMARKS``) from ``data_dir`` with ``protocol`` (a key of
    ``BENCHMARKS[name].protocols``, default the first); see `hf_longclip.data.benchmarks`."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(sorted(BENCHMARKS))}")
    return BENCHMARKS[name](data_dir, split, max_samples, protocol, annotation_file=annotation_file,
                            image_root=image_root, num_workers=num_workers)


def schema_fields(benchmark: str | Benchmark | datasets.Dataset) -> frozenset[str]:
    """Schema fields provided by a benchmark name (declared, no data read), a loaded `Benchmark` or a dataset."""
    if isinstance(benchmark, str):
        if benchmark not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {benchmark!r}; choose one of {', '.join(sorted(BENCHMARKS))}")
        return BENCHMARKS[benchmark].fields
    if isinstance(benchmark, Benchmark):
        return benchmark.fields
    return dataset_fields(benchmark)


def _register(name: str, features: dict, splits: Sequence[str], description: str, *, protocol: str, layout: str,
              protocol_description: str):
    """Register a benchmark with its default protocol (``protocol``, laid out as ``layout``) read by the loader."""
    def decorator(load):
        spec = BenchmarkSpec(name=name, load=load, fields=frozenset(features), splits=tuple(splits),
                             default_split=splits[0], description=description)
        spec.protocols[protocol] = Protocol(protocol, load, layout, protocol_description, tuple(splits))
        BENCHMARKS[name] = spec
        load.features = datasets.Features(features)
        return load
    return decorator


def _protocol(benchmark: str, name: str, features: dict, splits: Sequence[str], layout: str, description: str):
    """Register a further protocol of an already registered benchmark (its loader reads another file layout)."""
    def decorator(load):
        BENCHMARKS[benchmark].protocols[name] = Protocol(name, load, layout, description, tuple(splits))
        load.features = datasets.Features(features)
        return load
    return decorator


def describe_benchmarks() -> Iterable[str]:
    """One line per registered benchmark (name, splits, fields, description), e.g. for ``--help`` texts."""
    for name, spec in sorted(BENCHMARKS.items()):
        yield (f"{name}: {spec.description} [splits: {', '.join(spec.splits)}; "
               f"fields: {', '.join(sorted(spec.fields))}]")


def describe_protocols() -> Iterable[str]:
    """Each benchmark's protocols (default first) with the tree each expects under ``--data-dir``, for ``--help``."""
    for name, spec in sorted(BENCHMARKS.items()):
        for index, protocol in enumerate(spec.protocols.values()):
            default = " (default)" if index == 0 else ""
            yield f"{name} --protocol {protocol.name}{default}: {protocol.description}"
            yield from _indent(protocol.layout, "    ").splitlines()
