"""Loaders for the real on-disk formats of the long-text / hierarchy benchmarks, all returning one sample schema.

API (used by the ``hf-longclip eval`` command)::

    from hf_longclip.data.benchmarks import BENCHMARKS, load_benchmark, schema_fields

    bench = load_benchmark("urban1k", "data/Urban1k", split=None, max_samples=None, protocol=None)
    bench.dataset      # datasets.Dataset, rows in the schema below
    bench.num_skipped  # records dropped because an image was missing, corrupt or unreadable (each one logged)
    bench.fields       # schema fields the rows carry, e.g. frozenset({"image", "caption", "sentences"})
    sorted(BENCHMARKS) # the names (CLI choices); BENCHMARKS[name] is a `BenchmarkSpec`, callable as the loader
    schema_fields("coco")  # the fields a benchmark provides, known without loading any data

``load_benchmark(name, data_dir, split=None, max_samples=None, *, protocol=None, annotation_file=None,
image_root=None, num_workers=None)``: ``protocol`` picks how the files are laid out and read, each the one of a
paper's evaluation code (``BENCHMARKS[name].protocols``, the first by default; e.g. ``coco``: ``karpathy``,
``longclip``, ``flair``), and a missing file or folder raises ``FileNotFoundError`` showing the paths tried and the
tree the protocol expects (``describe_protocols()`` lists them all); ``split=None`` picks the protocol's evaluation
split;
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
- ``label`` (``ClassLabel``): the class of an image-folder image (``imagefolder``; zero-shot classification with the
  protocol's ``Benchmark.templates``).

Images are verified when loading (fully decoded by :func:`hf_longclip.data.image_files.decode_image`: EXIF
orientation, first frame, the pixel limit), so a missing, empty, truncated, too large or corrupt file drops its record
(logged with its path through :mod:`logging`, counted in ``num_skipped``, by reason in ``skipped`` and listed in
``skipped_paths``) and never fails later; under the ``error`` policy (``HF_LONGCLIP_BAD_SAMPLES=error``) the first
one raises ``ValueError`` naming the file and the record. A missing data directory, annotation file or image
directory raises ``FileNotFoundError`` naming the
expected path and format, as does a benchmark none of whose images exist (a wrong image root); a malformed record
raises ``ValueError`` naming the file and the record.

Each loader's docstring gives its expected layout and the public code whose reading of the format it matches. One
module per format family (``sharegpt4v``, ``urban1k``, ``docci`` with HiMo-Docci, ``dci``, ``karpathy`` for COCO and
Flickr30k, ``cxc``, ``hierarcaps``, ``cola``, ``imagefolder``), each registering its loaders and protocols in
``registry.BENCHMARKS``; ``records`` holds what they share, ``flair`` FLAIR's repackaged annotations. Which
evaluations a benchmark supports is the evaluation's business:
``hf_longclip.evaluation.available_tasks(bench.dataset)``.
"""

from .cola import COLA_JSONS, load_cola_multi
from .cxc import (
    CXC_COLUMNS,
    CXC_FEATURES,
    CXC_FOLDERS,
    CXC_ID_COLUMNS,
    CXC_SPLITS,
    CXC_THRESHOLDS,
    INT64,
    load_coco_cxc,
    read_cxc,
)
from .dci import LONG_DCI_CSV, load_long_dci, load_long_dci_flair
from .docci import DOCCI_RELEASE, DOCCI_TEST_SET, HIMO_DOCCI_JSON, load_docci, load_docci_flair, load_himo_docci
from .flair import load_flair_annotations
from .hierarcaps import HIERARCAPS_CSV, HIERARCAPS_LEVELS, load_hierarcaps
from .imagefolder import CLASSNAMES_FILE, load_image_folder, load_image_folder_simple
from .karpathy import (
    FLICKR_KAGGLE_CSV,
    FLICKR_TOKEN_FILES,
    KARPATHY_SPLITS,
    load_coco,
    load_coco_flair,
    load_coco_val2017,
    load_flickr30k,
    load_flickr30k_flair,
    load_flickr30k_kaggle,
    load_flickr30k_token,
)
from .registry import (
    BASE_FEATURES,
    BENCHMARKS,
    IMAGE,
    SCHEMA_FIELDS,
    TEXT,
    TEXTS,
    Benchmark,
    BenchmarkSpec,
    LayoutNotFoundError,
    PathLike,
    Protocol,
    dataset_fields,
    describe_benchmarks,
    describe_protocols,
    load_benchmark,
    schema_fields,
)
from .sharegpt4v import SHAREGPT4V_JSON, SHAREGPT4V_TEST_SIZE, load_sharegpt4v
from .urban1k import load_urban1k, load_urban1k_flair

__all__ = [
    "BASE_FEATURES",
    "BENCHMARKS",
    "CLASSNAMES_FILE",
    "COLA_JSONS",
    "CXC_COLUMNS",
    "CXC_FEATURES",
    "CXC_FOLDERS",
    "CXC_ID_COLUMNS",
    "CXC_SPLITS",
    "CXC_THRESHOLDS",
    "DOCCI_RELEASE",
    "DOCCI_TEST_SET",
    "FLICKR_KAGGLE_CSV",
    "FLICKR_TOKEN_FILES",
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
    "LayoutNotFoundError",
    "Protocol",
    "dataset_fields",
    "describe_benchmarks",
    "describe_protocols",
    "load_benchmark",
    "load_coco",
    "load_coco_cxc",
    "load_coco_flair",
    "load_coco_val2017",
    "load_cola_multi",
    "load_docci",
    "load_docci_flair",
    "load_flair_annotations",
    "load_flickr30k",
    "load_flickr30k_flair",
    "load_flickr30k_kaggle",
    "load_flickr30k_token",
    "load_hierarcaps",
    "load_himo_docci",
    "load_image_folder",
    "load_image_folder_simple",
    "load_long_dci",
    "load_long_dci_flair",
    "load_sharegpt4v",
    "load_urban1k",
    "load_urban1k_flair",
    "read_cxc",
    "schema_fields",
]
