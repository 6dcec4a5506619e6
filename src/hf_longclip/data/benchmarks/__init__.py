"""Loaders for the real on-disk formats of the long-text / hierarchy benchmarks, all returning one sample schema.

API (used by the ``hf-longclip eval`` command)::

    from hf_longclip.data.benchmarks import BENCHMARKS, load_benchmark, schema_fields

    bench = load_benchmark("urban1k", "data/Urban1k", split=None, max_samples=None)
    bench.dataset      # datasets.Dataset, rows in the schema below
    bench.num_skipped  # records dropped because an image was missing, corrupt or unreadable (each one logged)
    bench.fields       # schema fields the rows carry, e.g. frozenset({"image", "caption", "sentences"})
    sorted(BENCHMARKS) # the names (CLI choices); BENCHMARKS[name] is a `BenchmarkSpec`, callable as the loader
    schema_fields("coco")  # the fields a benchmark provides, known without loading any data

``load_benchmark(name, data_dir, split=None, max_samples=None, *, annotation_file=None, image_root=None,
num_workers=None)``: ``split=None`` picks the benchmark's evaluation split (``BENCHMARKS[name].default_split``);
``max_samples`` keeps the first N readable records; ``annotation_file`` / ``image_root`` override the default
layout and are resolved against ``data_dir`` (an absolute path is used as is); ``num_workers`` threads verify images.

Schema (the one of :mod:`hf_longclip.data.synthetic`; a benchmark only has the columns it can fill):

- ``id`` (str): the record's identifier in its source (example id, file stem, COCO id, row id, ...).
- ``image``: a ``datasets.Image(mode="RGB")`` column referencing the file on disk (decoded lazily as PIL RGB).
- ``caption`` (str): the long caption; ``sentences`` (list[str]): ``split_sentences(caption)``.
- ``captions`` (list[str]): every reference caption of the image (COCO / Flickr30k: 5 or more; COLA: 2, one per
  image of ``images``).
- ``subtexts`` (list[str]): hierarchical cumulative caption prefixes, generic to full (HiMo-Docci).
- ``levels`` (list[str], 4): a HierarCaps chain from generic to specific; ``image_id`` (int): its COCO image id
  (several chains share one image).
- ``images`` (list of 2 images): COLA multi-object pairs; caption ``captions[i]`` applies to ``images[i]``.

Images are verified when loading (opened and fully decoded), so a missing, truncated or corrupt file drops its record
(logged with its path through :mod:`logging`, counted in ``num_skipped`` and listed in ``skipped_paths``) and never
fails later. A missing data directory, annotation file or image directory raises ``FileNotFoundError`` naming the
expected path and format, as does a benchmark none of whose images exist (a wrong image root); a malformed record
raises ``ValueError`` naming the file and the record.

Each loader's docstring gives its expected layout and the public code whose reading of the format it matches. One
module per format family (``sharegpt4v``, ``urban1k``, ``docci`` with HiMo-Docci, ``dci``, ``karpathy`` for COCO and
Flickr30k, ``cxc``, ``hierarcaps``, ``cola``), each registering its loaders in ``registry.BENCHMARKS``; ``records``
holds what they share. Which evaluations a benchmark supports is the evaluation's business:
``hf_longclip.evaluation.available_tasks(bench.dataset)``.
"""

from .cola import COLA_JSONS, load_cola_multi
from .cxc import CXC_COLUMNS, CXC_FEATURES, CXC_ID_COLUMNS, CXC_SPLITS, CXC_THRESHOLDS, INT64, load_coco_cxc, read_cxc
from .dci import LONG_DCI_CSV, load_long_dci
from .docci import DOCCI_RELEASE, DOCCI_TEST_SET, HIMO_DOCCI_JSON, load_docci, load_himo_docci
from .hierarcaps import HIERARCAPS_CSV, HIERARCAPS_LEVELS, load_hierarcaps
from .karpathy import KARPATHY_SPLITS, load_coco, load_flickr30k
from .registry import (
    BASE_FEATURES,
    BENCHMARKS,
    IMAGE,
    SCHEMA_FIELDS,
    TEXT,
    TEXTS,
    Benchmark,
    BenchmarkSpec,
    PathLike,
    dataset_fields,
    describe_benchmarks,
    load_benchmark,
    schema_fields,
)
from .sharegpt4v import SHAREGPT4V_JSON, SHAREGPT4V_TEST_SIZE, load_sharegpt4v
from .urban1k import load_urban1k

__all__ = [
    "BASE_FEATURES",
    "BENCHMARKS",
    "COLA_JSONS",
    "CXC_COLUMNS",
    "CXC_FEATURES",
    "CXC_ID_COLUMNS",
    "CXC_SPLITS",
    "CXC_THRESHOLDS",
    "DOCCI_RELEASE",
    "DOCCI_TEST_SET",
    "HIERARCAPS_CSV",
    "HIERARCAPS_LEVELS",
    "HIMO_DOCCI_JSON",
    "IMAGE",
    "INT64",
    "KARPATHY_SPLITS",
    "LONG_DCI_CSV",
    "SCHEMA_FIELDS",
    "SHAREGPT4V_JSON",
    "SHAREGPT4V_TEST_SIZE",
    "TEXT",
    "TEXTS",
    "Benchmark",
    "BenchmarkSpec",
    "PathLike",
    "dataset_fields",
    "describe_benchmarks",
    "load_benchmark",
    "load_coco",
    "load_coco_cxc",
    "load_cola_multi",
    "load_docci",
    "load_flickr30k",
    "load_hierarcaps",
    "load_himo_docci",
    "load_long_dci",
    "load_sharegpt4v",
    "load_urban1k",
    "read_cxc",
    "schema_fields",
]
