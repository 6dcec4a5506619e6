"""Sentence descriptiveness of DITM (Jang et al., Sec. III-B, Eq. 1-2): cumulative TF-IDF over a pool of sentences.

    delta(t) = sum over the distinct words w of t of (N_w / N) * log(M / M_w)                      (Eq. 1-2)

N_w: occurrences of w in t; N: words of t; M: sentences in the pool; M_w: pool sentences containing w (natural log;
the base cancels in the min-max normalisation). Equivalently delta(t) is the mean idf of t's word occurrences.

    scorer = DescriptivenessScorer().fit(train_sentences)       # pool statistics: M, M_w, raw min / max
    scorer.raw_scores(["a black dog on the grass"])             # delta(t)
    scorer.scores(["a black dog on the grass"])                 # min-max normalised with the pool's min / max
    train = add_descriptiveness_column(train, "captions")       # a cached `datasets` column (pool: these rows)

Choices (the paper leaves them open):

* Words (`tokenize_words`): the text is lower-cased (Unicode), then every maximal run of Unicode letters and digits
  is a word; anything else separates ("Black-and-white dog's" -> black, and, white, dog, s), before stop-words go.
* Stop-words (`ENGLISH_STOP_WORDS`, NLTK's English list; matched against single lower-cased words) are removed
  before counting: they count neither in N nor in the pool. A sentence left with no word (empty, None, punctuation
  only, or all stop-words) has delta = 0. Pass ``stop_words=()`` for Eq. 1 over every word.
* The pool is every sentence given to `fit` (the training sentences; Sec. IV-E's analysis scores use the test
  sentences as the pool), empty ones included: each is a document of M and takes part in the min and max.
* A word absent from the pool (scoring sentences outside it) keeps its place in N and gets M_w = 1, i.e. idf log M,
  the idf of the pool's rarest words: unseen words count as the most specific.
* Normalisation: (delta - min) / (max - min) with the raw min and max over the pool, so the pool's own sentences
  land exactly in [0, 1]; other sentences are clipped to [0, 1] by default (``clip=False`` keeps the affine value).
* A pool whose sentences all have the same delta (one sentence: every idf is log(1/1) = 0) has no min-max range:
  normalising raises ValueError; `raw_scores` (and ``normalize=False`` for the column) still work.

Counting runs on Arrow compute kernels (pyarrow, the storage of `datasets`): regex split, stop-word filter,
dictionary encoding, distinct (sentence, word) pairs by hashing, vocabulary look-up; numpy sums the idfs per
sentence. Memory stays per batch. A million sentences: about 4.5 s to fit and 2.5 s to write the column, on one
core of a busy 2-core machine (benchmarks/bench_descriptiveness.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.utils import tqdm

# The word rule of `tokenize_words`, as an RE2 separator pattern (Arrow's regex engine): maximal runs of Unicode
# letters (L) and numbers (N) are words, anything else separates them.
WORD_SEPARATOR = r"[^\p{L}\p{N}]+"

# NLTK's English stop-words (nltk_data corpora/stopwords/english, the 179-entry list of nltk 3.x) without its 26
# entries with an apostrophe ("don't", "you're", ...): the tokeniser splits those at the apostrophe and every piece
# ("don", "t", "you", "re", ...) is in the list. Function words only: numbers, colours and positions ("two", "top",
# "front") stay, unlike scikit-learn's list, since they are what makes a caption specific.
ENGLISH_STOP_WORDS = frozenset((
    "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself", "yourselves", "he",
    "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they", "them", "their", "theirs",
    "themselves", "what", "which", "who", "whom", "this", "that", "these", "those", "am", "is", "are", "was", "were",
    "be", "been", "being", "have", "has", "had", "having", "do", "does", "did", "doing", "a", "an", "the", "and", "but",
    "if", "or", "because", "as", "until", "while", "of", "at", "by", "for", "with", "about", "against", "between",
    "into", "through", "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on",
    "off", "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how", "all",
    "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only", "own", "same",
    "so", "than", "too", "very", "s", "t", "can", "will", "just", "don", "should", "now", "d", "ll", "m", "o", "re",
    "ve", "y", "ain", "aren", "couldn", "didn", "doesn", "hadn", "hasn", "haven", "isn", "ma", "mightn", "mustn",
    "needn", "shan", "shouldn", "wasn", "weren", "won", "wouldn",
))

FIT_BATCH_SIZE = 65_536  # sentences per Arrow batch in `fit` and `raw_scores`
_REDUCE_EVERY = 64  # partial document-frequency tables kept before they are summed (bounds fit's memory)
# relative width under which the pool's min-max range counts as zero (float round-off of equal sums)
RANGE_TOLERANCE = 1e-9
# Cache key of computed columns: any edit of this file invalidates them.
SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _stop_array(stop_words: Iterable[str]) -> pa.Array:
    return pa.array(sorted({word.lower() for word in stop_words}), type=pa.string())


def _as_strings(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous string array (null stays null)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if not pa.types.is_string(array.type):
        array = array.cast(pa.string())
    return array


def _words(texts: pa.Array, stop_words: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Every kept word occurrence of `texts`, in order, and the index of its sentence in `texts`."""
    lists = pc.split_pattern_regex(pc.utf8_lower(texts), WORD_SEPARATOR)
    words, parents = pc.list_flatten(lists), pc.list_parent_indices(lists)
    keep = pc.not_equal(words, "")  # the separator at either end leaves an empty piece
    if len(stop_words):
        keep = pc.and_(keep, pc.invert(pc.is_in(words, value_set=stop_words)))
    return pc.filter(words, keep), pc.filter(parents, keep).to_numpy()


def tokenize_words(text: str, stop_words: Iterable[str] = ENGLISH_STOP_WORDS) -> list[str]:
    """The words of `text` that Eq. 1 counts: lower-cased (Unicode) maximal runs of letters and digits, stop-words
    removed. The same kernels as `DescriptivenessScorer`, so the two always agree."""
    words, _ = _words(pa.array([text], type=pa.string()), _stop_array(stop_words))
    return words.to_pylist()


def _slices(array: pa.Array, batch_size: int) -> Iterator[pa.Array]:
    for start in range(0, len(array), batch_size):
        yield array.slice(start, batch_size)


# A pool to fit on: called once per pass, it yields (sentences, rows they came from) batches.
Batches = Callable[[], Iterator[tuple[pa.Array, int]]]


def _as_pool(texts) -> pa.Array:
    """Sentences as one Arrow string array: a list / iterable of str (or None), or an Arrow (chunked) array."""
    if isinstance(texts, str):
        raise TypeError("expected a collection of sentences, got a single str")
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        return _as_strings(texts)
    return pa.array(list(texts), type=pa.string())


def _column_is_list(dataset: datasets.Dataset, column: str) -> bool:
    if column not in dataset.column_names:
        raise KeyError(f"no column {column!r}; columns: {dataset.column_names}")
    kind = dataset.data.schema.field(column).type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        kind, is_list = kind.value_type, True
    else:
        is_list = False
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise TypeError(f"column {column!r} must hold sentences (strings, or lists of strings), "
                        f"got {dataset.data.schema.field(column).type}")
    return is_list


def _documents(values: pa.ChunkedArray | pa.Array, is_list: bool) -> pa.Array:
    """The sentences of one batch of a column: the strings themselves, or the list items in order."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return _as_strings(pc.list_flatten(values) if is_list else values)


def _dataset_batches(dataset: datasets.Dataset, column: str, batch_size: int) -> Batches:
    is_list = _column_is_list(dataset, column)
    view = dataset.with_format("arrow")  # batches follow any indices mapping (select, shuffle, ...)

    def batches() -> Iterator[tuple[pa.Array, int]]:
        for table in view.iter(batch_size):
            yield _documents(table.column(column), is_list), table.num_rows

    return batches


class DescriptivenessScorer:
    """DITM's sentence descriptiveness (Eq. 1-2) with the statistics of a pool of sentences (see the module doc).

    After `fit`: `vocabulary` (the pool's words, sorted), `document_frequency` (M_w of each), `num_documents` (M)
    and `raw_min` / `raw_max` (the min-max range of delta over the pool).
    """

    def __init__(self, stop_words: Iterable[str] | None = ENGLISH_STOP_WORDS):
        self.stop_words = frozenset(word.lower() for word in (stop_words or ()))
        self._stop = _stop_array(self.stop_words)
        self.vocabulary: pa.Array | None = None
        self.document_frequency: np.ndarray | None = None
        self.num_documents = 0
        self.raw_min: float | None = None
        self.raw_max: float | None = None
        self._idf: np.ndarray | None = None  # log(M / M_w) of each vocabulary word, then log M for unseen words
        self._fingerprint: str | None = None

    # -- fitting ------------------------------------------------------------------------------------------------
    def fit(self, texts, batch_size: int = FIT_BATCH_SIZE) -> DescriptivenessScorer:
        """Pool statistics from `texts` (a list of sentences or an Arrow string array); returns self."""
        pool = _as_pool(texts)
        return self._fit(lambda: ((batch, len(batch)) for batch in _slices(pool, batch_size)), total=len(pool),
                         desc="Descriptiveness pool")

    def fit_dataset(self, dataset: datasets.Dataset, column: str = "caption",
                    batch_size: int = FIT_BATCH_SIZE) -> DescriptivenessScorer:
        """Pool statistics from a dataset column of sentences, or of lists of sentences (each item one sentence)."""
        return self._fit(_dataset_batches(dataset, column, batch_size), total=len(dataset),
                         desc=f"Descriptiveness pool of {column!r}")

    def _fit(self, batches: Batches, total: int, desc: str) -> DescriptivenessScorer:
        """Two passes over the pool: document frequencies, then the raw min and max."""
        parts, num_documents = [], 0
        with tqdm(total=2 * total, desc=desc, unit=" rows") as progress:
            for texts, rows in batches():  # pass 1: M and M_w
                num_documents += len(texts)
                words, parents = _words(texts, self._stop)
                if len(words):  # M_w of this batch: distinct (sentence, word id) pairs, hashed as one int64 each
                    encoded = pc.dictionary_encode(words)
                    size = len(encoded.dictionary)
                    pairs = pc.unique(pa.array(parents.astype(np.int64) * size + encoded.indices.to_numpy())).to_numpy()
                    parts.append(pa.table({"w": encoded.dictionary,
                                           "n": np.bincount(pairs % size, minlength=size).astype(np.int64)}))
                    if len(parts) >= _REDUCE_EVERY:
                        parts = [_sum_counts(parts)]
                progress.update(rows)
            if num_documents == 0:
                raise ValueError("the pool is empty: descriptiveness needs at least one sentence (min-max "
                                 "normalisation at least two with different scores)")
            table = _sum_counts(parts) if parts else pa.table({"w": pa.array([], pa.string()),
                                                                "n": pa.array([], pa.int64())})
            table = table.sort_by("w")
            self.vocabulary = _as_strings(table.column("w"))
            self.document_frequency = table.column("n").to_numpy().astype(np.int64)
            self.num_documents = num_documents
            self._idf = np.append(np.log(num_documents / self.document_frequency), math.log(num_documents))
            self.raw_min, self.raw_max, self._fingerprint = math.inf, -math.inf, None
            for texts, rows in batches():  # pass 2: the raw min and max over the pool
                if len(texts):
                    raw = self._raw(texts)
                    self.raw_min, self.raw_max = min(self.raw_min, raw.min()), max(self.raw_max, raw.max())
                progress.update(rows)
            self.raw_min, self.raw_max = float(self.raw_min), float(self.raw_max)
        return self

    # -- scoring ------------------------------------------------------------------------------------------------
    @property
    def fitted(self) -> bool:
        return self._idf is not None

    def _require_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError("DescriptivenessScorer is not fitted: call fit(sentences) or fit_dataset(...) first")

    def _raw(self, texts: pa.Array) -> np.ndarray:
        words, parents = _words(texts, self._stop)
        unseen = len(self._idf) - 1
        index = pc.index_in(words, value_set=self.vocabulary).fill_null(unseen).to_numpy(zero_copy_only=False)
        n = len(texts)
        sums = np.bincount(parents, weights=self._idf[index], minlength=n)
        counts = np.bincount(parents, minlength=n)
        return np.divide(sums, counts, out=np.zeros(n), where=counts > 0)

    def idf(self, words: Iterable[str]) -> np.ndarray:
        """log(M / M_w) of each word (lower-cased; log M for a word absent from the pool, stop-words included,
        though those never count in a score)."""
        self._require_fitted()
        index = pc.index_in(pa.array([word.lower() for word in words], type=pa.string()), value_set=self.vocabulary)
        return self._idf[index.fill_null(len(self._idf) - 1).to_numpy(zero_copy_only=False)]

    def raw_scores(self, texts, batch_size: int = FIT_BATCH_SIZE) -> np.ndarray:
        """delta(t) of Eq. 2 for each sentence (float64, >= 0; 0 for a sentence with no word left)."""
        self._require_fitted()
        pool = _as_pool(texts)
        if len(pool) == 0:
            return np.zeros(0)
        return np.concatenate([self._raw(batch) for batch in _slices(pool, batch_size)])

    def check_normalizable(self) -> None:
        """Raise ValueError if the pool's min-max range is zero (e.g. a one-sentence pool)."""
        self._require_fitted()
        if not self.raw_max - self.raw_min > RANGE_TOLERANCE * max(1.0, abs(self.raw_max)):
            raise ValueError(
                f"min-max normalisation of descriptiveness is undefined for this pool: all its {self.num_documents} "
                f"sentence(s) have raw descriptiveness {self.raw_min:.6g} (a one-sentence pool always does: every "
                "word then has idf log(1/1) = 0). Fit on more sentences, or use raw scores (raw_scores(), "
                "normalize=False).")

    def normalize(self, raw: np.ndarray, clip: bool = True) -> np.ndarray:
        """(raw - min) / (max - min) with the pool's raw min and max; clipped to [0, 1] unless ``clip=False``."""
        self.check_normalizable()
        scores = (np.asarray(raw, dtype=np.float64) - self.raw_min) / (self.raw_max - self.raw_min)
        return np.clip(scores, 0.0, 1.0, out=scores) if clip else scores

    def scores(self, texts, clip: bool = True) -> np.ndarray:
        """Normalised descriptiveness of each sentence: in [0, 1] (exactly so for the pool's own sentences)."""
        self.check_normalizable()
        return self.normalize(self.raw_scores(texts), clip=clip)

    def fingerprint(self) -> str:
        """Hash of everything the scores depend on: stop-words, pool statistics and this module's source."""
        self._require_fitted()
        if self._fingerprint is None:
            digest = hashlib.sha256()
            header = {"source": SOURCE_HASH, "stop_words": sorted(self.stop_words), "M": self.num_documents,
                      "min": self.raw_min.hex(), "max": self.raw_max.hex()}
            digest.update(json.dumps(header).encode())
            digest.update("\0".join(self.vocabulary.to_pylist()).encode())
            digest.update(self.document_frequency.astype("<i8").tobytes())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def __repr__(self) -> str:
        if not self.fitted:
            return f"DescriptivenessScorer(stop_words={len(self.stop_words)} words, not fitted)"
        return (f"DescriptivenessScorer(M={self.num_documents}, vocabulary={len(self.vocabulary)}, "
                f"raw range=[{self.raw_min:.4g}, {self.raw_max:.4g}], stop_words={len(self.stop_words)} words)")


def _sum_counts(parts: list[pa.Table]) -> pa.Table:
    summed = pa.concat_tables(parts).group_by("w").aggregate([("n", "sum")])
    return pa.table({"w": summed.column("w"), "n": summed.column("n_sum")})


# ---------------------------------------------------------------------------------------------------------------
# `datasets` column
# ---------------------------------------------------------------------------------------------------------------
class _ScoreBatch:
    """The `Dataset.map` function: one Arrow batch in, the same batch with the score column appended."""

    def __init__(self, scorer: DescriptivenessScorer, column: str, output_column: str, is_list: bool,
                 normalize: bool, clip: bool):
        self.scorer, self.column, self.output_column = scorer, column, output_column
        self.is_list, self.normalize, self.clip = is_list, normalize, clip

    def __call__(self, batch: pa.Table) -> pa.Table:
        values = batch.column(self.column)
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
        texts = _documents(values, self.is_list)
        scores = self.scorer._raw(texts) if len(texts) else np.zeros(0)
        if self.normalize:
            scores = self.scorer.normalize(scores, clip=self.clip)
        if self.is_list:  # back to one list per row, aligned with the sentences (a null list stays null)
            lengths = pc.list_value_length(values).fill_null(0).to_numpy(zero_copy_only=False)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(scores, pa.float64()),
                                              mask=values.is_null() if values.null_count else None)
        else:
            column = pa.array(scores, pa.float64())
        return batch.append_column(self.output_column, column)


def _with_format_of(result: datasets.Dataset, original: datasets.Dataset) -> datasets.Dataset:
    """Give `result` (mapped on an arrow-formatted view) back the format of `original`, as `datasets` does for its
    own transforms: the new column is formatted unless the format listed columns, all of which were not."""
    fmt = original.format
    columns = fmt["columns"]
    if set(columns) >= set(original.column_names):
        columns = None
    else:
        unformatted = set(original.column_names) - set(columns)
        columns = sorted(set(result.column_names) - unformatted)
    return result.with_format(type=fmt["type"], columns=columns, output_all_columns=fmt["output_all_columns"],
                              **fmt["format_kwargs"])


def add_descriptiveness_column(
    dataset: datasets.Dataset,
    column: str = "caption",
    *,
    scorer: DescriptivenessScorer | None = None,
    output_column: str = "descriptiveness",
    normalize: bool = True,
    clip: bool = True,
    batch_size: int = 10_000,
    num_proc: int | None = None,
    load_from_cache_file: bool | None = None,
) -> datasets.Dataset:
    """`dataset` with a column of descriptiveness scores of `column`, computed once and cached by `datasets`.

    `column` holds sentences (one float per row) or lists of sentences, e.g. several captions per image (a list of
    floats per row, aligned; each item is one sentence of the pool). The pool is `scorer`'s if it is fitted;
    otherwise `scorer` (default: a `DescriptivenessScorer()` with the English stop-words) is fitted on this
    column, which is the paper's setting for the training split and Sec. IV-E's analysis scores for a test split.
    To score a validation split with the training pool, pass a scorer fitted on the training split.

    Scores are min-max normalised with the pool's range (``normalize=False``: raw delta; ``clip``: see
    `DescriptivenessScorer.normalize`). Raises ValueError when the pool's range is zero (e.g. one sentence) and
    ``normalize`` is set. The map runs batched over Arrow batches, with a progress bar; its fingerprint is that of
    `dataset`, the arguments and `scorer.fingerprint()`, so the same dataset and pool reuse the cache file and any
    other pool (or option) gives a new one. Fitting on the dataset (two passes, about 4.5 s per million sentences)
    runs on every call, cache hit or not: fit a scorer once and pass it to skip that.
    """
    if output_column == column:
        raise ValueError(f"output_column must differ from the sentence column {column!r}")
    is_list = _column_is_list(dataset, column)
    if scorer is None:
        scorer = DescriptivenessScorer()
    if not scorer.fitted:
        scorer.fit_dataset(dataset, column)
    if normalize:
        scorer.check_normalizable()
    options = {"source": SOURCE_HASH, "dataset": dataset._fingerprint, "column": column, "output": output_column,
               "normalize": normalize, "clip": clip, "scorer": scorer.fingerprint()}
    fingerprint = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:32]
    source = dataset.remove_columns(output_column) if output_column in dataset.column_names else dataset
    features = source.features.copy()
    score = datasets.Value("float64")
    features[output_column] = datasets.List(score) if is_list else score
    result = source.with_format("arrow").map(
        _ScoreBatch(scorer, column, output_column, is_list, normalize, clip),
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        features=features,
        new_fingerprint=fingerprint,
        load_from_cache_file=load_from_cache_file,
        desc=f"Descriptiveness of {column!r}",
    )
    return _with_format_of(result, dataset)
