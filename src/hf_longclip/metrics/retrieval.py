"""Image-text retrieval recall: one-to-one pairs (`recall_at_k`) and several captions per image
(`long_text_retrieval`, the COCO / Flickr30K / Urban1k / DOCCI protocol of HiMo-CLIP Tables 1-2, OneLIP Tables 1-2,
DITM Sec. IV-B and F-CAST Table 1), computed query chunk by query chunk so that memory stays bounded; R@1 within
twin pairs (`pair_recall_at_1`) and over images sharing one text (`recall_at_1_by_text`), OneLIP's text-length
miniature.

Every recall credits tied scores by one ``tie_rule`` (`hf_longclip.metrics.ties`): ``"fair"`` (default, the expected
credit under random tie-breaking), ``"optimistic"``, ``"pessimistic"``, or by position, ``"first"`` (the candidate
of lower index ranks first among tied ones: ``argmax``, a stable descending sort, CUDA top-k) or ``"last"`` (the one
of higher index: the last K of a stable ascending sort, ``argsort()[-K:]``); each result records the rule it used.
The position rules rank candidates in the order given (images in row order, texts in the order of ``text_embeds``),
so they reproduce a benchmark code only when its candidates are in the same order."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from .ties import (
    DEFAULT_TIE_RULE,
    INDEX_RULES,
    check_tie_rule,
    first_ranked,
    hit_credit,
    pairwise_credit,
    tied_ahead,
)

# Default budget of one chunk's score matrix, in elements (float32: 64 MiB; ranks are counted in place in it).
CHUNK_ELEMENTS = 1 << 24
# Counts of 1.0s summed in float32 are exact below this many entries per row.
EXACT_FLOAT_COUNT = 1 << 24
# Embeddings are degenerate when more than this fraction of their rows repeat another row (L2-normalised, to
# DUPLICATE_DECIMALS decimals): a collapsed model, or the same input encoded again and again.
DEGENERATE_FRACTION = 0.1
DUPLICATE_DECIMALS = 4


class DegenerateEmbeddingsWarning(UserWarning):
    """Retrieval scores of embeddings whose rows are mostly the same: ties decide the recalls."""


def duplicate_fraction(embeddings: torch.Tensor) -> float:
    """The fraction of rows of `embeddings` (rows, d) that repeat an earlier row once L2-normalised and rounded to
    `DUPLICATE_DECIMALS` decimals (0 when all rows differ, 1 - 1/rows when all are the same)."""
    unit = torch.nn.functional.normalize(embeddings.double(), dim=1)
    distinct = torch.unique(torch.round(unit, decimals=DUPLICATE_DECIMALS), dim=0).shape[0]
    return 1 - distinct / embeddings.shape[0]


def warn_if_degenerate(result: dict, threshold: float = DEGENERATE_FRACTION, **embeddings: torch.Tensor) -> None:
    """A `DegenerateEmbeddingsWarning` when more than `threshold` of the rows of one of `embeddings` (name=tensor)
    are duplicates (`duplicate_fraction`), with the tie counts of `result` (keys starting with `ties_`)."""
    fractions = {name: duplicate_fraction(tensor) for name, tensor in embeddings.items()}
    degenerate = {name: fraction for name, fraction in fractions.items() if fraction > threshold}
    if degenerate:
        ties = ", ".join(f"{key} = {value}" for key, value in result.items() if key.startswith("ties_"))
        shown = ", ".join(f"{fraction:.0%} of {name}" for name, fraction in degenerate.items())
        warnings.warn(
            f"degenerate embeddings: {shown} repeat another row (a collapsed model or repeated inputs?). Ties decide "
            f"the recalls (credited by the tie rule {result.get('tie_rule')!r}); queries whose positive ties with "
            f"another candidate: {ties}", DegenerateEmbeddingsWarning, stacklevel=3)


def recall_at_k(similarity: torch.Tensor, k: int = 1, tie_rule: str = DEFAULT_TIE_RULE) -> float:
    """Percent of queries (rows) whose paired item (the same index) is among the k most similar columns.

    A paired item with g columns scored strictly higher and t others tied with it counts
    ``clamp((k - g) / (t + 1), 0, 1)`` under ``tie_rule="fair"`` (its chance under random tie-breaking), ``g < k``
    under ``"optimistic"``, ``g + t < k`` under ``"pessimistic"``, ``g`` + the tied columns of lower (``"first"``) /
    higher (``"last"``) index ``< k`` (`hf_longclip.metrics.ties.hit_credit`)."""
    if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1] or similarity.shape[0] == 0:
        raise ValueError(f"expected a non-empty square query x item similarity matrix, got {tuple(similarity.shape)}")
    if not torch.isfinite(similarity).all():
        raise ValueError("similarity contains NaN or inf")
    check_tie_rule(tie_rule)
    scores = _exact_copy(similarity)
    own = scores.diagonal().unsqueeze(1).clone()
    ahead = (tied_ahead(scores == own, torch.arange(len(scores)), tie_rule) if tie_rule in INDEX_RULES else None)
    above, tied = _count_above_and_tied(scores, own)
    return hit_credit(above, tied - 1, torch.ones_like(tied), k, tie_rule, ahead).mean().item() * 100


def as_embeddings(value, name: str, ndim: int = 2) -> torch.Tensor:
    """``value`` (tensor, array or nested lists) as a finite float tensor of ``ndim`` dims with no empty dimension.

    float64 stays float64; every other dtype (integers, float16, bfloat16) becomes float32. Raises ValueError naming
    ``name`` for a wrong number of dimensions, an empty dimension, ragged rows, or NaN/inf.
    """
    try:
        tensor = value.detach().cpu() if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a numeric array of {ndim} dims (ragged rows?): {error}") from None
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise ValueError(f"{name} must be real numbers, got dtype {tensor.dtype}")
    tensor = tensor if tensor.dtype == torch.float64 else tensor.float()
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(tensor.shape)}")
    if tensor.numel() == 0:
        raise ValueError(f"{name} is empty: shape {tuple(tensor.shape)}")
    # amax / amin propagate NaN and return inf if any; unlike torch.isfinite they need no copy of the tensor
    if not (torch.isfinite(tensor.amax()) and torch.isfinite(tensor.amin())):
        raise ValueError(f"{name} contains NaN or inf")
    return tensor


def as_embedding_pair(first, first_name: str, second, second_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Two embedding matrices (`as_embeddings`) of the same dim, in one dtype (float64 for both if they differ)."""
    a, b = as_embeddings(first, first_name), as_embeddings(second, second_name)
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"embedding dims differ: {first_name} has dim {a.shape[1]}, {second_name} has dim {b.shape[1]}"
        )
    if a.dtype != b.dtype:
        a, b = a.double(), b.double()
    return a, b


def as_index(value, name: str, length: int, upper: int, upper_name: str) -> torch.Tensor:
    """``value`` as a 1-D int64 tensor of ``length`` entries in [0, upper); ValueError naming ``name`` otherwise."""
    try:
        array = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a 1-D list of integers: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if len(array) != length:
        raise ValueError(f"{name} has {len(array)} entries, expected {length}")
    if length and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    index = torch.as_tensor(array.astype(np.int64))
    bad = (index < 0) | (index >= upper)
    if bad.any():
        first = int(torch.nonzero(bad)[0])
        raise ValueError(
            f"{name}[{first}] = {int(index[first])} is out of range: must be in [0, {upper}) ({upper_name})"
        )
    return index


def _exact_copy(scores: torch.Tensor) -> torch.Tensor:
    """A float32 (float64 stays float64) copy of ``scores`` for `_count_above_and_tied`, whose in-place counts would
    overwrite the caller's matrix and, in float16 / bfloat16, stop being exact past 2048 / 256 entries per row."""
    return scores.to(torch.float64 if scores.dtype == torch.float64 else torch.float32, copy=True)


def _count_above_and_tied(scores: torch.Tensor, threshold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the numbers of ``scores`` strictly above and exactly equal to ``threshold`` (rows, 1), int64;
    overwrites ``scores``.

    ``sub_`` then ``sign_`` leave +1 / 0 / -1 in place (for finite floats x - t is 0 iff x == t, and has the sign of
    the comparison); its row sums give above - below, then after ``abs_`` above + below. No bool matrix and no int64
    copy of it (``(scores > t).sum(1)`` needs both, 9 more bytes per score). Exact while a row has fewer than 2**24
    entries (float32 integers); longer rows take the plain way.
    """
    if scores.shape[1] >= EXACT_FLOAT_COUNT:
        return (scores > threshold).sum(dim=1), (scores == threshold).sum(dim=1)
    signs = scores.sub_(threshold).sign_()
    net = signs.sum(dim=1)  # above - below
    unequal = signs.abs_().sum(dim=1)  # above + below
    return ((net + unequal) / 2).long(), scores.shape[1] - unequal.long()


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    ks = tuple(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in ks):
        raise ValueError(f"ks must be a non-empty sequence of positive integers, got {ks}")
    return tuple(int(k) for k in ks)


def _chunk_rows(chunk_size: int | None, num_queries: int, num_items: int) -> int:
    if chunk_size is None:
        return max(1, min(num_queries, CHUNK_ELEMENTS // num_items))
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    return int(chunk_size)


def long_text_retrieval(
    image_embeds,
    text_embeds,
    text_to_image,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int | None = None,
    tie_rule: str = DEFAULT_TIE_RULE,
) -> dict[str, float | int | str]:
    """Recall@K both ways when each image has one or more captions (COCO / Flickr30K: 5 per image).

    - ``image_embeds`` (num_images, d) and ``text_embeds`` (num_texts, d): the score of a pair is the dot product,
      i.e. the cosine similarity for L2-normalised embeddings, which is what every paper uses; the embeddings are
      NOT normalised here (pass normalised ones).
    - ``text_to_image`` (num_texts,): the index of each caption's image. Every image needs at least one caption
      (a ValueError names the first image without one).
    - image-to-text: image i is a hit at K if ANY of its captions is among its K best-scored texts;
      text-to-image: caption t is a hit at K if its image is among its K best-scored images.
      With one caption per image both directions equal `recall_at_k`.
    - ``tie_rule`` (`hf_longclip.metrics.ties`): ``"fair"`` (default) credits each query its chance of a hit when
      ties are broken at random. For image-to-text with several captions, the captions scored exactly as the
      image's best caption and the n negatives tied with them are ordered at random; with g negatives scored
      higher, the m = K - g places left hold a caption unless all m go to negatives: credit
      ``1 - C(n, m) / C(n + p, m)`` (p tied captions; ``(K - g) / (n + 1)`` for one), so ties among the image's own
      captions cost nothing. ``"optimistic"`` counts g < K (ties as hits), ``"pessimistic"`` g + n < K;
      ``"first"`` breaks ties by index, lower first (a hit when g + the tied negatives of lower index than the
      query's first tied positive < K: ``torch.argmax`` and top-k as Long-CLIP's Urban1k and Flickr30k codes use
      them), ``"last"`` higher first (the last K of an ascending ``argsort``, Long-CLIP's COCO code). How many
      queries had a tie (a negative candidate scored exactly as their best positive) is reported, and embeddings
      whose rows are mostly duplicates (`duplicate_fraction` above `DEGENERATE_FRACTION`: a collapsed model) raise
      a `DegenerateEmbeddingsWarning`.
    - Computed over chunks of queries: one chunk's (chunk, num_candidates) score matrix at a time, never the full
      matrix. ``chunk_size=None`` picks the number of queries so that a chunk holds at most ``CHUNK_ELEMENTS``
      (2**24) scores: about 64 MiB of float32 at peak beyond the inputs, whatever their size (ranks are counted in
      place in the chunk). float32 and float64 inputs mixed are both cast to float64 (a copy).

    Returns ``{"r1_i2t", "r5_i2t", "r10_i2t", "r1_t2i", "r5_t2i", "r10_t2i", "rsum", "num_images", "num_texts",
    "ties_i2t", "ties_t2i", "tie_rule"}`` (keys follow ``ks``): recalls in percent, ``rsum`` the sum of all the
    recalls (RSUM of DITM Sec. IV-B), the counts of queries with a tie, the rule that credited them.
    """
    ks = _check_ks(ks)
    check_tie_rule(tie_rule)
    images, texts = as_embedding_pair(image_embeds, "image_embeds", text_embeds, "text_embeds")
    num_images, num_texts = images.shape[0], texts.shape[0]
    owner = as_index(text_to_image, "text_to_image", num_texts, num_images, "num_images")
    captions_per_image = torch.bincount(owner, minlength=num_images)
    if (captions_per_image == 0).any():
        missing = torch.nonzero(captions_per_image == 0).flatten()
        raise ValueError(
            f"{len(missing)} image(s) have no caption in text_to_image, first: image {int(missing[0])}; "
            "every image needs at least one caption"
        )

    # captions grouped by image: those of image i are by_image[starts[i]:starts[i + 1]]
    by_image = torch.argsort(owner, stable=True)
    starts = torch.zeros(num_images + 1, dtype=torch.int64)
    starts[1:] = torch.cumsum(captions_per_image, 0)

    # per query: candidates above its best positive, negatives and positives tied with it (`hit_credit`)
    by_index = tie_rule in INDEX_RULES
    i2t_above, i2t_negatives, i2t_positives, i2t_ahead = (torch.zeros(num_images, dtype=torch.int64)
                                                          for _ in range(4))
    step = _chunk_rows(chunk_size, num_images, num_texts)
    for lo in range(0, num_images, step):
        hi = min(lo + step, num_images)
        scores = images[lo:hi] @ texts.T
        positives = by_image[starts[lo] : starts[hi]]
        rows = owner[positives] - lo
        best = torch.full((hi - lo,), -torch.inf, dtype=scores.dtype)
        best.scatter_reduce_(0, rows, scores[rows, positives], reduce="amax")
        at_best = scores[rows, positives] == best[rows]
        positives_at_best = torch.bincount(rows[at_best], minlength=hi - lo)
        if by_index:  # before the counts overwrite the scores
            anchor = first_ranked(rows[at_best], positives[at_best], hi - lo, tie_rule)
            i2t_ahead[lo:hi] = tied_ahead(scores == best.unsqueeze(1), anchor, tie_rule)
        above, tied = _count_above_and_tied(scores, best.unsqueeze(1))
        i2t_above[lo:hi], i2t_positives[lo:hi] = above, positives_at_best
        i2t_negatives[lo:hi] = tied - positives_at_best
        del scores  # before the next chunk's scores exist

    t2i_above, t2i_negatives, t2i_ahead = (torch.zeros(num_texts, dtype=torch.int64) for _ in range(3))
    step = _chunk_rows(chunk_size, num_texts, num_images)
    for lo in range(0, num_texts, step):
        hi = min(lo + step, num_texts)
        scores = texts[lo:hi] @ images.T
        positive = scores.gather(1, owner[lo:hi].unsqueeze(1))
        if by_index:
            t2i_ahead[lo:hi] = tied_ahead(scores == positive, owner[lo:hi], tie_rule)
        above, tied = _count_above_and_tied(scores, positive)
        t2i_above[lo:hi], t2i_negatives[lo:hi] = above, tied - 1
        del scores

    result: dict[str, float | int | str] = {}
    for direction, above, negatives, positives, ahead in (
            ("i2t", i2t_above, i2t_negatives, i2t_positives, i2t_ahead),
            ("t2i", t2i_above, t2i_negatives, torch.ones_like(t2i_above), t2i_ahead)):
        for k in ks:
            credit = hit_credit(above, negatives, positives, k, tie_rule, ahead if by_index else None)
            result[f"r{k}_{direction}"] = credit.mean().item() * 100
    result["rsum"] = sum(result.values())
    result["num_images"] = num_images
    result["num_texts"] = num_texts
    result["ties_i2t"], result["ties_t2i"] = int((i2t_negatives > 0).sum()), int((t2i_negatives > 0).sum())
    result["tie_rule"] = tie_rule
    warn_if_degenerate(result, image_embeds=images, text_embeds=texts)
    return result


# ---------------------------------------------------------------------------------------------------------------
# COCO 1K: the 5K test split in folds of consecutive images
# ---------------------------------------------------------------------------------------------------------------
COCO_5K_IMAGES = 5000  # images of the COCO Karpathy test split (the "5K" protocol)
COCO_1K_FOLDS = 5  # the "1K" protocol: mean over 5 folds of 1000 consecutive images (VSE++ / VSE-infinity)


def fold_retrieval(
    image_embeds,
    text_embeds,
    text_to_image,
    num_folds: int = COCO_1K_FOLDS,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int | None = None,
    tie_rule: str = DEFAULT_TIE_RULE,
) -> dict:
    """`long_text_retrieval` on each of ``num_folds`` folds of consecutive images, and the mean over the folds.

    The COCO 1K protocol (VSE++ ``evalrank(fold5=True)``, VSE-infinity, ALBEF-era tables): the 5000 Karpathy test
    images are cut into 5 folds of 1000 consecutive images (image order = row order); each fold keeps the captions
    of its own images (``text_to_image`` decides, whatever the order of the texts) and is ranked against its own
    images and captions only. The number of images must be a multiple of ``num_folds``.

    Returns the mean of every recall over the folds under the keys of `long_text_retrieval` (``r1_i2t`` ...,
    ``rsum`` = the mean of the folds' RSUMs = the sum of the mean recalls; the ties summed over the folds),
    ``num_images`` / ``num_texts`` (all folds together), ``num_folds``, ``images_per_fold``, ``tie_rule`` and
    ``folds`` (the per-fold results of `long_text_retrieval`, in order).
    """
    if isinstance(num_folds, bool) or not isinstance(num_folds, (int, np.integer)) or num_folds < 1:
        raise ValueError(f"num_folds must be a positive integer, got {num_folds!r}")
    images, texts = as_embedding_pair(image_embeds, "image_embeds", text_embeds, "text_embeds")
    num_images, num_texts = images.shape[0], texts.shape[0]
    owner = as_index(text_to_image, "text_to_image", num_texts, num_images, "num_images")
    if num_images % num_folds:
        raise ValueError(f"{num_images} images cannot be cut into {num_folds} equal folds of consecutive images")
    per_fold = num_images // num_folds
    folds = []
    for fold in range(int(num_folds)):
        lo, hi = fold * per_fold, (fold + 1) * per_fold
        members = torch.nonzero((owner >= lo) & (owner < hi)).flatten()
        folds.append(long_text_retrieval(images[lo:hi], texts[members], owner[members] - lo, ks, chunk_size,
                                          tie_rule))
    keys = [key for key in folds[0] if key not in ("num_images", "num_texts", "tie_rule")]
    result: dict = {key: sum(fold[key] for fold in folds) / (1 if key.startswith("ties_") else num_folds)
                    for key in keys}
    result.update(num_images=num_images, num_texts=num_texts, num_folds=int(num_folds), images_per_fold=per_fold,
                  tie_rule=tie_rule, folds=folds)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Recall@K with arbitrary positive sets (Crisscrossed Captions)
# ---------------------------------------------------------------------------------------------------------------
def _positive_sets(positives, num_queries: int, num_items: int, name: str) -> list[list[int]]:
    """``positives`` (a (queries, items) boolean matrix, or one sequence of item indices per query) as lists."""
    if isinstance(positives, (torch.Tensor, np.ndarray)) and positives.ndim == 2:
        matrix = torch.as_tensor(np.asarray(positives.detach().cpu() if isinstance(positives, torch.Tensor)
                                            else positives))
        if matrix.dtype != torch.bool:
            raise ValueError(f"{name}: a positives matrix must be boolean, got dtype {matrix.dtype}")
        if tuple(matrix.shape) != (num_queries, num_items):
            raise ValueError(f"{name}: positives matrix has shape {tuple(matrix.shape)}, expected "
                             f"({num_queries}, {num_items})")
        return [torch.nonzero(row).flatten().tolist() for row in matrix]
    if len(positives) != num_queries:
        raise ValueError(f"{name}: {len(positives)} positive sets for {num_queries} queries")
    sets = []
    for query, items in enumerate(positives):
        items = [int(item) for item in items]
        bad = [item for item in items if not 0 <= item < num_items]
        if bad:
            raise ValueError(f"{name}: query {query} has positive {bad[0]} out of range [0, {num_items})")
        sets.append(sorted(set(items)))
    return sets


def multi_positive_recall(
    query_embeds,
    item_embeds,
    positives,
    ks: Sequence[int] = (1, 5),
    exclude_self: bool = False,
    chunk_size: int | None = None,
    name: str = "positives",
    tie_rule: str = DEFAULT_TIE_RULE,
) -> dict[str, float | int | str]:
    """Recall@K when each query has its own set of positive items: a query is a hit at K if ANY of its positives is
    among its K best-scored items (scores: dot products; ties credited by ``tie_rule`` as in `long_text_retrieval`:
    fair by default, positives tied among themselves cost nothing).

    - ``positives``: a (num_queries, num_items) boolean matrix, or one sequence of item indices per query.
    - ``exclude_self=True`` (intramodal retrieval: queries and items are the same set, I->I and T->T): the query
      itself is removed from its candidates and from its positives.
    - Queries left without any positive are not scored (the CxC protocol cannot rank them); they are counted.

    Returns ``{"r1", "r5", "num_queries" (scored), "num_without_positive", "tie_rule"}`` (keys follow ``ks``); the
    recalls are NaN when no query has a positive.
    """
    ks = _check_ks(ks)
    check_tie_rule(tie_rule)
    queries, items = as_embedding_pair(query_embeds, "query_embeds", item_embeds, "item_embeds")
    num_queries, num_items = queries.shape[0], items.shape[0]
    if exclude_self and num_queries != num_items:
        raise ValueError(f"exclude_self needs the queries to be the items, got {num_queries} and {num_items}")
    sets = _positive_sets(positives, num_queries, num_items, name)
    if exclude_self:
        sets = [[item for item in items_ if item != query] for query, items_ in enumerate(sets)]
    scored = torch.tensor([bool(items_) for items_ in sets])
    by_index = tie_rule in INDEX_RULES
    above, negatives, positives_at_best, ahead = (torch.zeros(num_queries, dtype=torch.int64) for _ in range(4))
    step = _chunk_rows(chunk_size, num_queries, num_items)
    for lo in range(0, num_queries, step):
        hi = min(lo + step, num_queries)
        scores = queries[lo:hi] @ items.T
        local = torch.arange(hi - lo)
        if exclude_self:
            scores[local, local + lo] = -torch.inf
        rows = torch.tensor([row for row in range(hi - lo) for _ in sets[lo + row]], dtype=torch.int64)
        cols = torch.tensor([item for row in range(lo, hi) for item in sets[row]], dtype=torch.int64)
        best = torch.zeros(hi - lo, dtype=scores.dtype)  # stays 0 for a query without positives (not scored)
        if len(rows):
            best.scatter_reduce_(0, rows, scores[rows, cols], reduce="amax", include_self=False)
            at_best = scores[rows, cols] == best[rows]
            positives_at_best[lo:hi] = torch.bincount(rows[at_best], minlength=hi - lo)
            if by_index:
                anchor = first_ranked(rows[at_best], cols[at_best], hi - lo, tie_rule)
                ahead[lo:hi] = tied_ahead(scores == best.unsqueeze(1), anchor, tie_rule)
        chunk_above, tied = _count_above_and_tied(scores, best.unsqueeze(1))
        above[lo:hi], negatives[lo:hi] = chunk_above, tied - positives_at_best[lo:hi]
        del scores
    result: dict[str, float | int | str] = {}
    count = int(scored.sum())
    for k in ks:
        credit = hit_credit(above[scored], negatives[scored], positives_at_best[scored], k, tie_rule,
                            ahead[scored] if by_index else None)
        result[f"r{k}"] = credit.mean().item() * 100 if count else float("nan")
    result["num_queries"] = count
    result["num_without_positive"] = num_queries - count
    result["tie_rule"] = tie_rule
    return result


def cxc_retrieval(
    image_embeds,
    text_embeds,
    i2t,
    t2i,
    t2t,
    i2i,
    ks: Sequence[int] = (1, 5),
    chunk_size: int | None = None,
    tie_rule: str = DEFAULT_TIE_RULE,
) -> dict[str, float | int | str]:
    """The four Crisscrossed Captions retrieval directions (Parekh et al., EACL 2021), Recall@K each.

    ``i2t`` / ``t2i``: per image, the indices of its positive texts, and per text its positive images (the original
    COCO pairs plus the CxC SITS positives); ``t2t``: per text its positive texts (STS), ``i2i``: per image its
    positive images (SIS); each may also be a boolean matrix (see `multi_positive_recall`). I->I and T->T rank the
    other images / texts (the query itself is excluded). Queries without a positive are skipped and counted. Ties
    are credited by ``tie_rule`` (`multi_positive_recall`).

    Returns ``{"r1_i2t", "r5_i2t", "r1_t2i", ..., "r5_t2t", "r5_i2i", "num_queries_<direction>",
    "num_without_positive_<direction>", "tie_rule"}``.
    """
    result: dict[str, float | int | str] = {}
    for direction, queries, items, positives, exclude in (
        ("i2t", image_embeds, text_embeds, i2t, False), ("t2i", text_embeds, image_embeds, t2i, False),
        ("t2t", text_embeds, text_embeds, t2t, True), ("i2i", image_embeds, image_embeds, i2i, True),
    ):
        scores = multi_positive_recall(queries, items, positives, ks, exclude_self=exclude, chunk_size=chunk_size,
                                       name=direction, tie_rule=tie_rule)
        for key, value in scores.items():
            if key != "tie_rule":
                result[f"{key}_{direction}"] = value
    result["tie_rule"] = tie_rule
    return result


PAIR_TIE_TOLERANCE = 1e-6  # cosine scores closer than this are a tie (same truncated text, other batch padding)


def pair_recall_at_1(image_embeds: torch.Tensor, text_embeds: torch.Tensor, pairs: Sequence[tuple[int, int]],
                     tie_rule: str = DEFAULT_TIE_RULE) -> tuple[float, float]:
    """R@1 image->text and text->image within each pair (a gallery of two: the own item and its twin), in percent.
    Scores within `PAIR_TIE_TOLERANCE` tie; a tie counts 1/2 under ``tie_rule="fair"`` (so chance is 50 and a model
    that cannot tell the twins apart scores exactly 50), 1 ``"optimistic"``, 0 ``"pessimistic"``, and under
    ``"first"`` / ``"last"`` goes to the pair's first / second item."""
    check_tie_rule(tie_rule)
    if not pairs:
        return float("nan"), float("nan")
    index = torch.tensor(list(pairs))
    similarity = torch.einsum("pid,pjd->pij", image_embeds[index], text_embeds[index])  # (pairs, image, text)
    own = similarity.diagonal(dim1=1, dim2=2)

    own_first = torch.tensor([True, False])  # the pair's first item's own candidate is the first of the two

    def recall(other: torch.Tensor) -> float:
        return pairwise_credit(own - other, tie_rule, PAIR_TIE_TOLERANCE, own_first).mean().item() * 100

    return recall(similarity[:, [0, 1], [1, 0]]), recall(similarity[:, [1, 0], [0, 1]])


def recall_at_1_by_text(image_embeds: torch.Tensor, text_embeds: torch.Tensor, owners: torch.Tensor,
                        tie_rule: str = DEFAULT_TIE_RULE) -> tuple[float, float]:
    """R@1 both ways, in percent, when several images share one text (`owners[i]`: the index in `text_embeds` of
    image i's text): image->text hits when its own text scores highest (one query per image), text->image when
    one of the images carrying the text scores highest (one query per distinct text, its carriers all positives);
    ties credited by ``tie_rule`` as in `long_text_retrieval` (fair: the chance of a hit under random tie-breaking).
    """
    check_tie_rule(tie_rule)
    similarity = _exact_copy(image_embeds @ text_embeds.T)  # (images, distinct texts)
    own = similarity.gather(1, owners[:, None])
    by_index = tie_rule in INDEX_RULES
    ahead = tied_ahead(similarity == own, owners, tie_rule) if by_index else None
    above, tied = _count_above_and_tied(similarity.clone(), own)
    i2t = hit_credit(above, tied - 1, torch.ones_like(tied), 1, tie_rule, ahead).mean().item() * 100
    carries = (owners[:, None] == torch.arange(text_embeds.shape[0])[None]).T  # (texts, images)
    scores = similarity.T
    best_own = scores.masked_fill(~carries, float("-inf")).amax(dim=1, keepdim=True)
    at_best = scores == best_own
    carriers_at_best = (at_best & carries).sum(dim=1)
    above = (scores > best_own).sum(dim=1)
    ahead = None
    if by_index:
        text_rows, carrier = torch.nonzero(at_best & carries, as_tuple=True)
        ahead = tied_ahead(at_best, first_ranked(text_rows, carrier, len(scores), tie_rule), tie_rule)
    t2i = hit_credit(above, at_best.sum(dim=1) - carriers_at_best, carriers_at_best, 1, tie_rule, ahead)
    return i2t, t2i.mean().item() * 100

