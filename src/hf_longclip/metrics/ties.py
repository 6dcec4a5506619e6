"""Tied scores: the rules every metric of the library credits them by, and the arithmetic of each rule.

- ``"fair"``: the expected credit when ties are broken uniformly at random (each query, or each comparison, breaking
  its own ties independently). For Recall@K, a positive with ``g`` candidates scored strictly higher and ``t`` others
  tied with it lands in the top K with probability ``clamp((K - g) / (t + 1), 0, 1)``; two identical captions of two
  images give image-to-text R@1 = 50.
- ``"optimistic"``: every tie resolved in the query's favour (the positive ranks first among its ties), as codes
  that count the candidates scored strictly higher.
- ``"pessimistic"``: every tie resolved against the query (the positive ranks last among its ties), as codes that
  ask for strictly higher scores (COLA's ``ColaMultiObjAcc``; HiMo-CLIP's Eq. 6 read literally).
- ``"first"``: ties broken by position, the candidate of lower index first: what ``torch.argmax`` (documented: the
  first maximal value), a stable sort and PyTorch's CUDA top-k kernel do. In a ranking the earlier of two tied
  candidates ranks higher; in an ascending order of values (HierarCaps' ``argsort`` of a chain's radii, HiMo@2/3's
  increasing scores) the earlier of two equal values comes first, i.e. the pair counts as in order.
- ``"last"``: ties broken by position the other way, the candidate of higher index first: what the last K entries
  of a stable ascending sort (``similarity.argsort()[-K:]``, Long-CLIP's COCO code) pick.

`DEFAULT_TIE_RULE` (``"fair"``) is the rule of the library's own protocols (the main job's tables, the recipes'
miniature evaluations, which pass it explicitly) and of the metrics whose benchmarks have no determinate tie-break
of their own. The metrics of a benchmark whose code breaks ties its own way default to that code's rule:
`HIERARCAPS_TIE_RULE` (``"first"``: TAU-VAILab/hierarcaps' ``HCEvaluator`` takes the first tied text with ``argmax``
and keeps tied radii in order with a stable ``argsort``) and `COLA_TIE_RULE` (``"pessimistic"``: COLA's
``ColaMultiObjAcc`` asks for a strict ``>``). Which rule each benchmark protocol's evaluation code applies, task by
task, is `hf_longclip.evaluation.ties`.
"""

from __future__ import annotations

import torch

TIE_RULES = ("fair", "optimistic", "pessimistic", "first", "last")
INDEX_RULES = ("first", "last")  # the rules that break ties by position (index order)
DEFAULT_TIE_RULE = "fair"

HIERARCAPS_TIE_RULE = "first"  # HCEvaluator's: argmax takes the first tied text, argsort keeps tied radii in order
COLA_TIE_RULE = "pessimistic"  # ColaMultiObjAcc's strict `>`: a tied comparison is wrong


def check_tie_rule(tie_rule: str, choices: tuple[str, ...] = TIE_RULES) -> str:
    """``tie_rule`` itself if it is one of ``choices`` (`TIE_RULES`; `hf_longclip.evaluation.ties.TIE_RULE_CHOICES`
    where ``"official"`` is meant too), else a ValueError naming them."""
    if tie_rule not in choices:
        raise ValueError(f"tie_rule must be one of {choices}, got {tie_rule!r}")
    return tie_rule


def hit_credit(above: torch.Tensor, tied_negatives: torch.Tensor, tied_positives: torch.Tensor, k: int,
               tie_rule: str, tied_ahead: torch.Tensor | None = None) -> torch.Tensor:
    """Per query, the credit (in [0, 1], float64) of "some positive is among the top ``k``".

    ``above``: candidates scored strictly higher than the query's best positive (all negatives); ``tied_negatives``
    and ``tied_positives`` (>= 1): the negatives and the positives scored exactly as that best positive. Under
    ``"fair"`` the tied group is ordered at random and fills the ``m = clamp(k - above, 0, n + p)`` places left, so
    the query misses iff those ``m`` places hold negatives only:
    ``credit = 1 - C(n, m) / C(n + p, m)`` (n tied negatives, p tied positives), i.e. ``m / (n + 1)`` for a single
    positive; ties among positives alone cost nothing. ``"optimistic"``: ``above < k``; ``"pessimistic"``:
    ``above + n < k`` (every tied negative ranked first). ``"first"`` / ``"last"``: ``above + tied_ahead < k``, with
    ``tied_ahead`` the tied negatives that the position order ranks before the query's first-ranked tied positive
    (those of lower index than the lowest-indexed tied positive under ``"first"``, of higher index than the
    highest-indexed one under ``"last"``; see `tied_ahead`), required for these two rules.
    """
    check_tie_rule(tie_rule)
    if tie_rule in INDEX_RULES:
        if tied_ahead is None:
            raise ValueError(f"tie_rule {tie_rule!r} breaks ties by position: pass tied_ahead")
        return (above + tied_ahead < k).double()
    if tie_rule == "optimistic":
        return (above < k).double()
    if tie_rule == "pessimistic":
        return (above + tied_negatives < k).double()
    credit = (above < k).double()  # exact for queries without a tied negative
    tied = torch.nonzero(tied_negatives > 0).flatten()
    negatives = tied_negatives[tied].double()
    group = negatives + tied_positives[tied].double()
    slots = torch.minimum(k - above[tied], tied_negatives[tied] + tied_positives[tied]).clamp(min=0)
    miss = torch.ones(len(tied), dtype=torch.float64)  # C(n, m) / C(n + p, m) = prod_{i < m} (n - i) / (n + p - i)
    for i in range(int(slots.max()) if len(tied) else 0):  # at most k rounds
        miss = torch.where(i < slots, miss * (negatives - i).clamp(min=0) / (group - i), miss)
    credit[tied] = 1 - miss
    return credit


def tied_ahead(tied: torch.Tensor, anchor: torch.Tensor, tie_rule: str) -> torch.Tensor:
    """Per row of ``tied`` (rows, candidates; True where a candidate ties with the row's best positive), the tied
    candidates that ``tie_rule``'s position order ranks before ``anchor`` (rows,), the row's first-ranked tied
    positive: those of lower index under ``"first"`` (``anchor`` = the lowest index of a tied positive), of higher
    index under ``"last"`` (``anchor`` = the highest). int64."""
    if tie_rule not in INDEX_RULES:
        raise ValueError(f"tied_ahead is for the position rules {INDEX_RULES}, got {tie_rule!r}")
    columns = torch.arange(tied.shape[1], device=tied.device)
    before = columns < anchor[:, None] if tie_rule == "first" else columns > anchor[:, None]
    return (tied & before).sum(dim=1)


def first_ranked(rows: torch.Tensor, items: torch.Tensor, num_rows: int, tie_rule: str) -> torch.Tensor:
    """Per row, the item of ``items`` (paired with ``rows``, both 1-D) that ``tie_rule``'s position order ranks
    first among them: the lowest index under ``"first"``, the highest under ``"last"`` (int64, -1 for a row with none).
    """
    reduce = "amin" if tie_rule == "first" else "amax"
    return torch.full((num_rows,), -1, dtype=torch.int64).scatter_reduce_(0, rows, items, reduce=reduce,
                                                                          include_self=False)


def pairwise_credit(margin: torch.Tensor, tie_rule: str, tolerance: float = 0.0, own_first=None) -> torch.Tensor:
    """Credit (float64) of winning a comparison of two candidates, ``margin`` = own score - other score: 1 above
    ``tolerance``, 0 below ``-tolerance``, and a tie (``|margin| <= tolerance``) 1/2 under ``"fair"`` (a coin toss),
    1 ``"optimistic"``, 0 ``"pessimistic"``; under ``"first"`` / ``"last"`` 1 when the own candidate comes first /
    last in position (``own_first``: a bool or a bool tensor broadcasting with ``margin``, required for them)."""
    check_tie_rule(tie_rule)
    if tie_rule in INDEX_RULES:
        if own_first is None:
            raise ValueError(f"tie_rule {tie_rule!r} breaks ties by position: pass own_first")
        first = torch.as_tensor(own_first, dtype=torch.bool)
        tie_value = (first if tie_rule == "first" else ~first).double()
    else:
        tie_value = {"fair": 0.5, "optimistic": 1.0, "pessimistic": 0.0}[tie_rule]
    tied = margin.abs() <= tolerance
    return torch.where(tied, tie_value, (margin > 0).double()).double()


def increasing_credit(values, tie_rule: str) -> float:
    """Credit of "``values`` are strictly increasing" when equal values are ordered at random: 0 if some value is
    below an earlier one; otherwise 1 / prod(r!) over the runs of r equal values under ``"fair"`` (the chance that
    every run comes out in increasing order), 1 ``"optimistic"``, and 1 only without equal neighbours
    ``"pessimistic"``. ``"first"`` orders equal values by position (the earlier first: in order, as
    ``"optimistic"``), ``"last"`` the other way (out of order, as ``"pessimistic"``)."""
    check_tie_rule(tie_rule)
    steps = [later - earlier for earlier, later in zip(values[:-1], values[1:])]
    if any(step < 0 for step in steps):
        return 0.0
    if tie_rule in ("optimistic", "first"):
        return 1.0
    if tie_rule in ("pessimistic", "last"):
        return float(all(step > 0 for step in steps))
    orders, run = 1, 1
    for step in steps:
        run = run + 1 if step == 0 else 1
        orders *= run  # a run of r equal values contributes r! in all
    return 1.0 / orders


def tied_pair_sign(tie_rule: str) -> float:
    """What a pair of tied values adds to Kendall's concordance sum: +1 (counted in order) under ``"optimistic"``
    and ``"first"`` (a stable ascending sort keeps the earlier value first), -1 ``"pessimistic"`` and ``"last"``,
    0 ``"fair"`` (in order with probability 1/2)."""
    return {"fair": 0.0, "optimistic": 1.0, "pessimistic": -1.0, "first": 1.0,
            "last": -1.0}[check_tie_rule(tie_rule)]

