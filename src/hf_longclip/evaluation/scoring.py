"""Retrieval scoring modes: how an image and a text are scored before the recalls rank them.

    global            cos(v_i, t): the global image and text embeddings, CLIP-style; every model
    conditioned       cos(AttnPool(t, v_i^tokens), t) for every pair: image i pooled once per text, the text as the
                      query (F-CAST Eq. 6-7 with the whole caption as query; FLAIR's `--inference-with-flair`)
    conditioned-topk  the global ranking first, then each image's k best texts re-scored conditioned on them
                      (FLAIR's `--inference-with-flair-topk --topk k`); the other pairs rank below every re-scored one

    check_scoring(model, "conditioned")                          # ValueError for a model without conditioned pooling
    scores = conditioned_score_matrix(model, processor, images, texts)        # (images, texts), chunked
    conditioned_retrieval_task(model, processor, dataset, "conditioned-topk", topk=128)

Conditioned scoring needs a model with text-conditioned pooling: `grounding_tokens(vision_outputs)` (the image's
local tokens and their padding) and `grounding_pool(queries, tokens, padding)` (FLAIR's AttnPool), as `FCASTModel`
has them. A converted FLAIR (`attention_pooling="flair"`) is scored as FLAIR's paper scores it; F-CAST's own
inference is the whole level (its Sec. 3.3, "global"), so its conditioned scores are reported with that note.

The recalls are `long_text_retrieval`'s (its tie rule and keys): the score matrix S is passed as the text embeddings
S^T against one-hot image embeddings, whose products give S back exactly (products with 0 and 1 are exact).
FLAIR's released evaluation (ExplainableML/flair, src/flair/train.py, `compute_retrieval_topk`) fills the pairs top-k
did not re-score with -1e10 and ranks text->image on the same matrix transposed; torch's argsort orders those ties by
index (stable up to 16 entries on the CPU, arbitrary beyond). Here they are ranked below every re-scored pair in
index order, whatever the tie rule: FLAIR's order where its sort is stable, and the same recalls whenever
k >= K and each text is re-scored by >= K images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..metrics.retrieval import long_text_retrieval
from ..metrics.ties import DEFAULT_TIE_RULE
from .encoding import ImageColumn, encode_texts, image_inputs, retrieval_texts

SCORING_MODES = ("global", "conditioned", "conditioned-topk")
DEFAULT_TOPK = 128  # FLAIR's README recommends k = 128 or 256
PAIRS_PER_CHUNK = 8192  # image-text pairs pooled at once: ~100 MB at FLAIR's ViT-B/16 sizes (196 tokens, 512 wide)
NOT_THE_PAPERS_INFERENCE = ("text-conditioned scoring is not F-CAST's inference (its Sec. 3.3 retrieves with the whole "
                            "level only: --scoring global)")


def has_conditioned_pooling(model) -> bool:
    """Whether `model` pools an image conditioned on a text (`grounding_tokens` and `grounding_pool`)."""
    return callable(getattr(model, "grounding_tokens", None)) and callable(getattr(model, "grounding_pool", None))


def check_scoring(model, scoring: str, topk: int | None = DEFAULT_TOPK) -> None:
    """ValueError, before anything is encoded, for an unknown mode, a model without text-conditioned pooling asked
    for a conditioned mode, or a top-k that is not a positive integer."""
    if scoring not in SCORING_MODES:
        raise ValueError(f"unknown scoring {scoring!r}; the modes are {', '.join(SCORING_MODES)}")
    if scoring == "global":
        return
    if not has_conditioned_pooling(model):
        raise ValueError(f"scoring {scoring!r} needs a model with text-conditioned pooling (FLAIR or F-CAST, an "
                         f"FCASTModel); {type(model).__name__} has none: use scoring 'global'")
    if scoring == "conditioned-topk" and (isinstance(topk, bool) or not isinstance(topk, int) or topk < 1):
        raise ValueError(f"scoring 'conditioned-topk' needs topk, a positive integer, got {topk!r}")


def _chunks(rows: int, columns: int, pairs_per_chunk: int):
    """(row slice, column slice) blocks of a rows x columns grid with at most `pairs_per_chunk` cells each (one
    row of at most `pairs_per_chunk` columns when a row is longer)."""
    step_columns = min(columns, pairs_per_chunk)
    step_rows = max(1, pairs_per_chunk // step_columns)
    for row in range(0, rows, step_rows):
        for column in range(0, columns, step_columns):
            yield slice(row, min(row + step_rows, rows)), slice(column, min(column + step_columns, columns))


def pooled_scores(model, tokens: torch.Tensor, padding: torch.Tensor | None, text_queries: torch.Tensor,
                  text_units: torch.Tensor, index: torch.Tensor, pairs_per_chunk: int = PAIRS_PER_CHUNK
                  ) -> torch.Tensor:
    """cos(AttnPool(t, tokens_i), t) (F-CAST Eq. 6-7) for image i of `tokens` (B, N, D) and the texts
    `index[i]` (B, Q) into `text_queries` (T, D; the pooling's queries, unnormalised as the model gives them) and
    `text_units` (T, D; L2-normalised), pooled in blocks of at most `pairs_per_chunk` pairs: (B, Q)."""
    scores = torch.empty(index.shape, dtype=text_units.dtype, device=text_units.device)
    for rows, columns in _chunks(*index.shape, pairs_per_chunk):
        chosen = index[rows, columns]
        pooled, _ = model.grounding_pool(text_queries[chosen].to(tokens.dtype), tokens[rows],
                                         None if padding is None else padding[rows])
        scores[rows, columns] = (F.normalize(pooled.float(), dim=-1) * text_units[chosen]).sum(dim=-1)
    return scores


def unscored_floor(num_images: int, num_texts: int) -> torch.Tensor:
    """The score of a pair top-k did not re-score: below every cosine (>= -1), decreasing with the image and the text
    index, so that such pairs rank below the re-scored ones in index order both ways (exact float32 integers)."""
    return -2.0 - (torch.arange(num_images, dtype=torch.float32)[:, None] + torch.arange(num_texts)[None])


@torch.no_grad()
def conditioned_score_matrix(model, processor, images, text_queries: torch.Tensor, topk: int | None = None,
                             batch_size: int = 64, pairs_per_chunk: int = PAIRS_PER_CHUNK,
                             progress: bool = False) -> torch.Tensor:
    """The (images, texts) score matrix (CPU float32) of every pair (`topk=None`) or of each image's `topk` best
    texts by global cosine, the others at `unscored_floor`. `images`: a list or a `datasets` image column, read
    `batch_size` at a time (each batch through the vision tower once); `text_queries`: the texts' unnormalised
    `pooler_output` (`encode_texts(..., normalize=False)`). Pairs are pooled in blocks of `pairs_per_chunk`."""
    device = model.device
    queries = text_queries.to(device)
    units = F.normalize(queries.float(), dim=-1)
    num_images, num_texts = len(images), len(text_queries)
    k = None if topk is None else min(topk, num_texts)
    matrix = torch.empty(num_images, num_texts) if k is None else unscored_floor(num_images, num_texts)
    starts = tqdm(range(0, num_images, batch_size), desc="conditioned scores", disable=not progress, leave=False)
    for lo in starts:
        batch = list(images[lo : lo + batch_size])
        vision = model.get_image_features(**image_inputs(model, processor, batch))
        tokens, padding = model.grounding_tokens(vision)
        if k is None:
            index = torch.arange(num_texts, device=device).expand(len(batch), -1)
        else:
            index = (F.normalize(vision.pooler_output.float(), dim=-1) @ units.T).topk(k, dim=-1).indices
        scores = pooled_scores(model, tokens, padding, queries, units, index, pairs_per_chunk).cpu()
        rows = torch.arange(lo, lo + len(batch))[:, None]
        matrix[rows, index.cpu()] = scores
    return matrix


def score_matrix_retrieval(scores: torch.Tensor, text_to_image, **options) -> dict:
    """`long_text_retrieval` (recalls, keys and tie rule; `options` are its keyword arguments) of an (images,
    texts) score matrix: one-hot image embeddings against the texts' columns of `scores`, whose products are the
    scores exactly."""
    return long_text_retrieval(torch.eye(scores.shape[0], dtype=scores.dtype), scores.T, text_to_image, **options)


def conditioned_retrieval_task(model, processor, dataset, scoring: str = "conditioned", topk: int = DEFAULT_TOPK,
                               batch_size: int = 64, progress: bool = False,
                               pairs_per_chunk: int = PAIRS_PER_CHUNK, tie_rule: str = DEFAULT_TIE_RULE) -> dict:
    """`retrieval_task`'s Recall@1/5/10 both ways over `captions` (several per image) or the single `caption`, the
    pairs scored `scoring` ("conditioned" or "conditioned-topk" with `topk`), plus ``scoring`` (and ``topk``) and,
    for a model whose own inference is the whole level (F-CAST), ``scoring_note``; ties credited by `tie_rule`. No
    fold means and no CxC: the whole set only, as FLAIR reports it."""
    check_scoring(model, scoring, topk)
    texts, owners = retrieval_texts(dataset)
    queries = encode_texts(model, processor, texts, batch_size, progress, normalize=False)
    scores = conditioned_score_matrix(model, processor, ImageColumn(dataset), queries,
                                      topk if scoring == "conditioned-topk" else None, batch_size, pairs_per_chunk,
                                      progress)
    result = score_matrix_retrieval(scores, owners, tie_rule=tie_rule)
    result["scoring"] = scoring
    if scoring == "conditioned-topk":
        result["topk"] = min(topk, len(texts))
    if getattr(model.config, "attention_pooling", "flair") != "flair":
        result["scoring_note"] = NOT_THE_PAPERS_INFERENCE
    return result
