"""How every metric of the library credits tied scores: one rule, chosen by name, ``"fair"`` by default.

- ``"fair"``: the expected credit when ties are broken uniformly at random (each query, or each comparison, breaking
  its own ties independently). For Recall@K, a positive with ``g`` candidates scored strictly higher and ``t`` others
  tied with it lands in the top K with probability ``clamp((K - g) / (t + 1), 0, 1)``; two identical captions of two
  images give image-to-text R@1 = 50.
- ``"optimistic"``: every tie resolved in the query's favour (the positive ranks first among its ties), as codes
  that count the candidates scored strictly higher.
- ``"pessimistic"``: every tie resolved against the query (the positive ranks last among its ties), as codes that
  ask for strictly higher scores (COLA's ``ColaMultiObjAcc``, HiMo-CLIP's strictly increasing HiMo@2/3).
"""

from __future__ import annotations

import torch

TIE_RULES = ("fair", "optimistic", "pessimistic")
DEFAULT_TIE_RULE = "fair"


def check_tie_rule(tie_rule: str) -> str:
    """``tie_rule`` itself if it is one of `TIE_RULES`, else a ValueError naming the choices."""
    if tie_rule not in TIE_RULES:
        raise ValueError(f"tie_rule must be one of {TIE_RULES}, got {tie_rule!r}")
    return tie_rule


def hit_credit(above: torch.Tensor, tied_negatives: torch.Tensor, tied_positives: torch.Tensor, k: int,
               tie_rule: str) -> torch.Tensor:
    """Per query, the credit (in [0, 1], float64) of "some positive is among the top ``k``".

    ``above``: candidates scored strictly higher than the query's best positive (all negatives); ``tied_negatives``
    and ``tied_positives`` (>= 1): the negatives and the positives scored exactly as that best positive. Under
    ``"fair"`` the tied group is ordered at random and fills the ``m = clamp(k - above, 0, n + p)`` places left, so
    the query misses iff those ``m`` places hold negatives only:
    ``credit = 1 - C(n, m) / C(n + p, m)`` (n tied negatives, p tied positives), i.e. ``m / (n + 1)`` for a single
    positive; ties among positives alone cost nothing. ``"optimistic"``: ``above < k``; ``"pessimistic"``:
    ``above + n < k`` (every tied negative ranked first).
    """
    check_tie_rule(tie_rule)
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


def pairwise_credit(margin: torch.Tensor, tie_rule: str, tolerance: float = 0.0) -> torch.Tensor:
    """Credit (float64) of winning a comparison of two candidates, ``margin`` = own score - other score: 1 above
    ``tolerance``, 0 below ``-tolerance``, and a tie (``|margin| <= tolerance``) 1/2 under ``"fair"`` (a coin toss),
    1 ``"optimistic"``, 0 ``"pessimistic"``."""
    tie_value = {"fair": 0.5, "optimistic": 1.0, "pessimistic": 0.0}[check_tie_rule(tie_rule)]
    tied = margin.abs() <= tolerance
    return torch.where(tied, tie_value, (margin > 0).double()).double()


def increasing_credit(values, tie_rule: str) -> float:
    """Credit of "``values`` are strictly increasing" when equal values are ordered at random: 0 if some value is
    below an earlier one; otherwise 1 / prod(r!) over the runs of r equal values under ``"fair"`` (the chance that
    every run comes out in increasing order), 1 ``"optimistic"``, and 1 only without equal neighbours
    ``"pessimistic"``."""
    check_tie_rule(tie_rule)
    steps = [later - earlier for earlier, later in zip(values[:-1], values[1:])]
    if any(step < 0 for step in steps):
        return 0.0
    if tie_rule == "optimistic":
        return 1.0
    if tie_rule == "pessimistic":
        return float(all(step > 0 for step in steps))
    orders, run = 1, 1
    for step in steps:
        run = run + 1 if step == 0 else 1
        orders *= run  # a run of r equal values contributes r! in all
    return 1.0 / orders


def tied_pair_sign(tie_rule: str) -> float:
    """What a pair of tied values adds to Kendall's concordance sum: +1 (counted in order) under ``"optimistic"``,
    -1 ``"pessimistic"``, 0 ``"fair"`` (in order with probability 1/2)."""
    return {"fair": 0.0, "optimistic": 1.0, "pessimistic": -1.0}[check_tie_rule(tie_rule)]

