"""HierarCaps hierarchical retrieval (Alper & Averbuch-Elor, ECCV 2024) and DITM's image-distance d_corr.

Follows the authors' evaluation code, https://github.com/TAU-VAILab/hierarcaps, file
``code/evaluation/hierarchical_retrieval.py``, method ``HCEvaluator.run`` (last changed in commit ab0166c, "cuda =>
args.device", which only moves tensors to ``args.device``; 8a28b2e before it), with ``--steps 50``
(``code/eval.py``):

- every embedding (images, texts, and the root = the text embedding of the empty string "") is L2-normalised;
- the radius of a text is its Euclidean distance to the root; the thresholds are ``np.linspace(rmin, rmax, steps)``
  over the radii of all the texts searched;
- at each threshold, each image retrieves the text of highest cosine similarity among the texts of radius
  <= threshold (``S[mask].argmax()``, the first in pool order on a tie); consecutive repeats are dropped, giving a
  predicted chain from generic (near the root) to specific;
- precision = |predicted ∩ ground truth| / |predicted| (sets of texts, ground truth = the texts of all the image's
  chains); recall at level l = 1 if the level-l text of any of the image's chains was predicted; recall = the
  mean over the 4 levels; all averaged over images;
- d_corr = mean over chains of Kendall's tau between the radii of the chain's 4 texts and [1, 2, 3, 4]. The code
  computes ``kendalltau(R.argsort(dim=-1)[c], [1, 2, 3, 4])`` with ``R`` a CPU torch tensor, whose argsort of 4
  values keeps tied values in level order (stable up to 16 values). That equals tau of the radii with every tied
  pair counted as concordant (a permutation and its inverse have the same number of inversions):
  ``d_corr_method="official"``, the default.

Ties (`hf_longclip.metrics.ties`), ``tie_rule``: the code breaks both of its ties by position, so the default,
``"first"`` (`HIERARCAPS_TIE_RULE`), gives ``HCEvaluator.run``'s numbers: a tie in retrieval (distinct texts with the
same embedding, e.g. captions that differ only past a text encoder's token limit) retrieves the first of them in
pool order, as ``argmax``; a tied pair of radii counts as in order (+1), as the stable argsort. ``"fair"`` is the
expectation under random tie-breaking: a group of texts with one embedding counts as one retrieved text, any of its
members, a hit in proportion |group ∩ truth| / |group|, and a tied pair of radii counts 0 (in order on a coin
toss); ``"optimistic"`` counts the group a hit if any member is true and a tied pair +1; ``"pessimistic"`` only if
all are, and -1; ``"last"`` retrieves the group's last member and counts a tied pair -1. Without such ties every
rule gives the code's numbers. ``d_corr_method="tau_b"`` uses tau-b instead (a tied pair counts as neither and
leaves the denominator; a chain whose 4 radii all tie, e.g. one text repeated, counts as 0) whatever ``tie_rule``.

DITM (Jang et al. 2025, Sec. IV-B) replaces the distance to the root by the distance to the chain's image:
``d_corr_image``, signed so that +1 means level 4 (most specific) is closest to the image and level 1 farthest,
DITM's intended order (its Fig. 8c, and the positive 83.3 of its Table III). DITM's code was not found; that sign
is inferred from the paper's text, and its ties follow ``d_corr_method`` and ``tie_rule`` as d_corr's do (under
"official" with "first", two texts equally far from the image count as in DITM's order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .retrieval import as_embeddings, as_index
from .ties import HIERARCAPS_TIE_RULE, INDEX_RULES, check_tie_rule, tied_pair_sign

NUM_LEVELS = 4


def kendall_tau_b(x, y) -> float:
    """Kendall's tau-b of two equally long 1-D sequences (ties adjusted, as ``scipy.stats.kendalltau``).

    tau_b = (P - Q) / sqrt((P + Q + T_x) (P + Q + T_y)), with P / Q the concordant / discordant pairs and T_x / T_y
    the pairs tied in x only / y only. NaN when x or y is constant (as scipy).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got shapes {x.shape} and {y.shape}")
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[j] - x[i]), np.sign(y[j] - y[i])
    both = np.sum(dx * dy)  # P - Q
    untied_x, untied_y = np.sum(dx != 0), np.sum(dy != 0)  # P + Q + T_y, P + Q + T_x
    if untied_x == 0 or untied_y == 0:
        return float("nan")
    return float(both / np.sqrt(untied_x * untied_y))


D_CORR_METHODS = ("official", "tau_b")


def _tau_with_levels(values: torch.Tensor, method: str, tie_rule: str) -> torch.Tensor:
    """Row-wise Kendall tau between each row of ``values`` (rows, n) and [1, ..., n].

    ``"official"``: the mean over all pairs of +1 (in order) / -1 (out of order), a tied pair counting
    `tied_pair_sign` (+1 under ``"first"`` and ``"optimistic"``: tau of the stable ``values.argsort()``, the code's).
    ``"tau_b"``: tau-b, a tied pair counts as neither; 0 for a constant row.
    """
    i, j = torch.triu_indices(values.shape[1], values.shape[1], offset=1)
    signs = torch.sign(values[:, j] - values[:, i])
    if method == "official":
        return torch.where(signs == 0, tied_pair_sign(tie_rule), signs).double().mean(dim=1)
    untied = (signs != 0).sum(dim=1).double()
    tau = signs.sum(dim=1).double() / torch.sqrt(untied * len(i))
    return torch.where(untied > 0, tau, torch.zeros_like(tau))


def text_pool(chain_texts: Sequence[Sequence[str]], chain_embeds) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """Turn per-chain texts and embeddings into a pool of distinct texts for `hierarcaps`.

    ``chain_texts[c]`` holds chain c's 4 texts (level 1 = generic ... level 4 = specific) and ``chain_embeds[c]``
    their embeddings, shape (num_chains, 4, d). Equal strings are one text (exact match, as the HierarCaps code);
    its embedding is the one at its first occurrence. Returns ``(texts, text_embeds, chains)`` with ``chains`` the
    (num_chains, 4) indices into ``texts``.
    """
    embeds = as_embeddings(chain_embeds, "chain_embeds", ndim=3)
    if len(chain_texts) != embeds.shape[0] or embeds.shape[1] != NUM_LEVELS:
        raise ValueError(
            f"chain_embeds must have shape (num_chains={len(chain_texts)}, {NUM_LEVELS}, dim), "
            f"got {tuple(embeds.shape)}"
        )
    index: dict[str, int] = {}
    rows, chains = [], []
    for c, chain in enumerate(chain_texts):
        if isinstance(chain, str) or len(chain) != NUM_LEVELS or not all(isinstance(t, str) for t in chain):
            raise ValueError(f"chain_texts[{c}] must be a list of {NUM_LEVELS} strings, got {chain!r}")
        ids = []
        for level, text in enumerate(chain):
            if text not in index:
                index[text] = len(index)
                rows.append(embeds[c, level])
            ids.append(index[text])
        chains.append(ids)
    return list(index), torch.stack(rows), torch.tensor(chains, dtype=torch.int64)


def hierarcaps(
    image_embeds,
    text_embeds,
    chains,
    root_embed,
    chain_to_image=None,
    num_thresholds: int = 50,
    d_corr_method: str = "official",
    tie_rule: str = HIERARCAPS_TIE_RULE,
) -> dict[str, float | int | str]:
    """HierarCaps metrics: hierarchical retrieval precision / recall and the d_corr order correlations.

    - ``image_embeds`` (num_images, d); ``text_embeds`` (num_texts, d), the pool of distinct texts searched (in
      HierarCaps: every text of every chain; see `text_pool`); ``root_embed`` (d,), the embedding of "".
      All are L2-normalised here, as the reference code does.
    - ``chains`` (num_chains, 4): indices into ``text_embeds`` of each ground-truth chain, level 1 (generic) to
      level 4 (specific); equal indices mean the same text.
    - ``chain_to_image`` (num_chains,): the image of each chain (an image may have several chains, all count as its
      ground truth); default: chain c belongs to image c. Every image needs at least one chain.
    - ``num_thresholds``: the number of radius thresholds (the code's ``--steps``, 50 by default).
    - ``d_corr_method``: how ``d_corr`` and ``d_corr_image`` treat tied values: ``"official"`` (default, as the
      HierarCaps code's ``kendalltau(radii.argsort(), [1, 2, 3, 4])``: a tied pair counts by ``tie_rule``, in
      order under the default) or ``"tau_b"`` (Kendall's tau-b: a tie counts as neither in nor out of order).
      Equal when no two values of a chain tie.
    - ``tie_rule``: how tied similarities (retrieval) and tied values (``"official"`` d_corr) are credited:
      ``"first"`` (default, `HIERARCAPS_TIE_RULE`: as ``HCEvaluator.run``, which breaks both by position), ``"fair"``
      (the expectation under random tie-breaking), ``"optimistic"``, ``"pessimistic"`` or ``"last"`` (see the
      module's docstring).

    Works in float64 and holds (num_images, num_texts) matrices (HierarCaps' test set: about 1k x 4k).

    Returns fractions in [0, 1] (as the reference code; DITM's Table III prints them x 100) and correlations in
    [-1, 1]: ``precision``, ``recall``, ``recall_level_1`` .. ``recall_level_4`` (over images), ``d_corr`` (radius
    order, HierarCaps), ``d_corr_image`` (distance-to-image order, DITM Sec. IV-B), ``num_images``, ``num_chains``,
    ``tie_rule``.
    """
    check_tie_rule(tie_rule)
    if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, (int, np.integer)) or num_thresholds < 1:
        raise ValueError(f"num_thresholds must be a positive integer, got {num_thresholds!r}")
    if d_corr_method not in D_CORR_METHODS:
        raise ValueError(f"d_corr_method must be one of {D_CORR_METHODS}, got {d_corr_method!r}")
    images = as_embeddings(image_embeds, "image_embeds").double()
    texts = as_embeddings(text_embeds, "text_embeds").double()
    root = as_embeddings(root_embed, "root_embed", ndim=1).double()
    for name, tensor in (("text_embeds", texts), ("root_embed", root)):
        if tensor.shape[-1] != images.shape[1]:
            raise ValueError(
                f"embedding dims differ: image_embeds has dim {images.shape[1]}, {name} has dim {tensor.shape[-1]}"
            )
    for name, tensor in (("image_embeds", images), ("text_embeds", texts), ("root_embed", root.unsqueeze(0))):
        if (tensor.norm(dim=-1) == 0).any():
            raise ValueError(f"{name} has a zero vector, which cannot be L2-normalised")
    images = images / images.norm(dim=-1, keepdim=True)
    texts = texts / texts.norm(dim=-1, keepdim=True)
    root = root / root.norm()
    num_images, num_texts = images.shape[0], texts.shape[0]

    chain_array = np.asarray(chains.detach().cpu() if isinstance(chains, torch.Tensor) else chains)
    if chain_array.ndim != 2 or chain_array.shape[1] != NUM_LEVELS or chain_array.shape[0] == 0:
        raise ValueError(f"chains must have shape (num_chains >= 1, {NUM_LEVELS}), got {chain_array.shape}")
    num_chains = chain_array.shape[0]
    chain_ids = as_index(chain_array.reshape(-1), "chains (flattened)", num_chains * NUM_LEVELS, num_texts,
                         "num_texts").view(num_chains, NUM_LEVELS)
    if chain_to_image is None:
        if num_chains != num_images:
            raise ValueError(
                f"without chain_to_image, chain c belongs to image c, but there are {num_chains} chains "
                f"and {num_images} images"
            )
        chain_to_image = range(num_images)
    owner = as_index(chain_to_image, "chain_to_image", num_chains, num_images, "num_images")
    chains_per_image = torch.bincount(owner, minlength=num_images)
    if (chains_per_image == 0).any():
        missing = int(torch.nonzero(chains_per_image == 0)[0])
        raise ValueError(f"image {missing} has no chain in chain_to_image; every image needs at least one chain")

    # hierarchical retrieval: the best text among those within each radius threshold
    radius = (texts - root).norm(dim=-1)
    thresholds = np.linspace(radius.min().item(), radius.max().item(), int(num_thresholds))
    # argmax takes the first of tied texts, as the code's; under "last" it searches the pool in reverse
    order = torch.arange(num_texts).flip(0) if tie_rule == "last" else torch.arange(num_texts)
    similarity, searched_radius = (images @ texts.T)[:, order], radius[order]
    retrieved = torch.zeros(num_images, num_texts, dtype=torch.bool)
    rows = torch.arange(num_images)
    for threshold in thresholds:
        best = similarity.masked_fill(searched_radius > threshold, -torch.inf).argmax(dim=1)
        retrieved[rows, order[best]] = True

    truth = torch.zeros(num_images, num_texts, dtype=torch.bool)
    truth[owner.repeat_interleave(NUM_LEVELS), chain_ids.flatten()] = True
    level_truths = []
    for level in range(NUM_LEVELS):
        level_truth = torch.zeros(num_images, num_texts, dtype=torch.bool)
        level_truth[owner, chain_ids[:, level]] = True  # the level-l texts of each image's chains
        level_truths.append(level_truth)
    level_hits = torch.zeros(num_images, NUM_LEVELS, dtype=torch.float64)
    if tie_rule in INDEX_RULES:  # the texts argmax retrieved, as the code
        precision = (retrieved & truth).sum(dim=1).double() / retrieved.sum(dim=1).clamp(min=1)
        for level, level_truth in enumerate(level_truths):
            level_hits[:, level] = (retrieved & level_truth).any(dim=1).double()
    else:
        precision, level_hits = _group_credit(texts, retrieved, truth, level_truths, tie_rule)
    recall_levels = level_hits.mean(dim=0)

    d_corr = _tau_with_levels(radius[chain_ids], d_corr_method, tie_rule).mean().item()
    image_distance = (texts[chain_ids] - images[owner].unsqueeze(1)).norm(dim=-1)
    d_corr_image = _tau_with_levels(-image_distance, d_corr_method, tie_rule).mean().item()

    result: dict[str, float | int] = {
        "precision": precision.mean().item(),
        "recall": level_hits.mean().item(),
    }
    for level in range(NUM_LEVELS):
        result[f"recall_level_{level + 1}"] = recall_levels[level].item()
    result.update(d_corr=d_corr, d_corr_image=d_corr_image, num_images=num_images, num_chains=num_chains,
                  tie_rule=tie_rule)
    return result


def _group_credit(texts: torch.Tensor, retrieved: torch.Tensor, truth: torch.Tensor,
                  level_truths: list[torch.Tensor], tie_rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image, precision and the level hits (num_images, 4) when each group of texts with one embedding counts
    as one retrieved text, any of its members, credited by ``tie_rule`` ("fair", "optimistic" or "pessimistic")."""
    # texts of one embedding form a group; argmax retrieved its first member, which stands for the whole group
    groups = torch.unique(texts, dim=0, return_inverse=True)[1]
    membership = torch.nn.functional.one_hot(groups).double()  # (num_texts, num_groups)
    group_size = membership.sum(dim=0)

    def share_true(truth: torch.Tensor) -> torch.Tensor:
        """(num_images, num_groups): the credit of a retrieved group as a hit of ``truth`` (num_images, num_texts)."""
        true_members = truth.double() @ membership
        if tie_rule == "fair":
            return true_members / group_size
        return (true_members > 0 if tie_rule == "optimistic" else true_members == group_size).double()

    retrieved_groups = retrieved.double() @ membership  # 1 where a group was retrieved (only its first member is)
    precision = (retrieved_groups * share_true(truth)).sum(dim=1) / retrieved.sum(dim=1).clamp(min=1)
    level_hits = torch.zeros(retrieved.shape[0], NUM_LEVELS, dtype=torch.float64)
    for level, level_truth in enumerate(level_truths):
        # a hit unless every retrieved group's member misses them (members drawn independently per group)
        level_hits[:, level] = 1 - (1 - retrieved_groups * share_true(level_truth)).prod(dim=1)
    return precision, level_hits
