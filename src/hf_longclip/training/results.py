"""The results tables the example scripts print, and their summary over seeds: mean, standard deviation and 95%
confidence interval of every metric of every variant (`--seeds`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# The one vocabulary of the printed tables, every script alike: results key -> (column header, decimals). Percentages
# (recalls, HiMo@2/3, SSI, accuracies, grounding) get one decimal, correlations and fractions three; a key not
# listed is its own header, with three decimals.
COLUMNS = {
    "r1_i2t": ("R@1 I2T", 1), "r1_t2i": ("R@1 T2I", 1), "rsum": ("RSUM", 1),
    "short_r1_i2t": ("short I2T", 1), "short_r1_t2i": ("short T2I", 1),
    "hard_r1_i2t": ("hard I2T", 1), "hard_r1_t2i": ("hard T2I", 1),
    "himo@2": ("HiMo@2", 1), "himo@3": ("HiMo@3", 1), "himo@k": ("HiMo@K", 3), "ssi": ("SSI", 1),
    "precision": ("HierarCaps P", 3), "recall": ("HierarCaps R", 3),
    "d_corr": ("d_corr root", 3), "d_corr_image": ("d_corr image", 3),
    "pointing_game": ("pointing game", 1), "box_mass": ("mass in box", 1),
    "map_difference": ("map difference", 1),
    "test_accuracy": ("accuracy", 1), "train_seconds": ("train s", 0),
}


def _cell(value, decimals: int) -> str:
    """A table cell: a number, or a seed summary as mean +- std (mean alone for one seed); "-" where missing."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        mean = f"{value['mean']:.{decimals}f}"
        return mean if value["n"] == 1 else f"{mean}±{value['std']:.{decimals}f}"
    return f"{value:.{decimals}f}"


def format_table(results: Mapping[str, Mapping], metrics: Sequence[str]) -> str:
    """One row per variant, one column per metric, headed and rounded as `COLUMNS` says; cells are numbers or
    `summarize_seeds` summaries ("-" where a row lacks the metric, e.g. `train_seconds` of a base evaluated as is)."""
    headers = [COLUMNS.get(name, (name, 3))[0] for name in metrics]
    cells = {variant: [_cell(values.get(name), COLUMNS.get(name, (name, 3))[1]) for name in metrics]
             for variant, values in results.items()}
    width = max([12, *(len(variant) + 2 for variant in results)])
    columns = [max(8, len(header) + 2, *(len(row[i]) + 2 for row in cells.values()))
               for i, header in enumerate(headers)]
    header = f"{'model':<{width}}" + "".join(f"{name:>{column}}" for name, column in zip(headers, columns))
    rows = [f"{variant:<{width}}" + "".join(f"{cell:>{column}}" for cell, column in zip(row, columns))
            for variant, row in cells.items()]
    return "\n".join([header, "-" * len(header), *rows])


# Two-sided 97.5% quantiles of Student's t for 1..10 degrees of freedom (a 95% interval of the mean over seeds).
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def summarize_seeds(runs: Mapping[int, Mapping[str, Mapping[str, float]]],
                    metrics: Sequence[str]) -> dict[str, dict[str, dict]]:
    """{variant: {metric: {"mean", "std", "ci95", "n", "values"}}} over the seeds of `runs` ({seed: {variant:
    {metric: value}}}): `std` is the sample standard deviation (n - 1), `ci95` the half-width of the 95% Student-t
    interval of the mean (both 0 for one seed). Every seed must report every variant and metric."""
    seeds = list(runs)
    variants = list(runs[seeds[0]])
    for seed in seeds:
        if list(runs[seed]) != variants:
            raise ValueError(f"seed {seed} reports variants {list(runs[seed])}, seed {seeds[0]} {variants}")
    summary = {}
    for variant in variants:
        summary[variant] = {}
        for metric in metrics:
            values = [float(runs[seed][variant][metric]) for seed in seeds]
            n, mean = len(values), math.fsum(values) / len(values)
            std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
            t = _T_975[min(n - 1, len(_T_975)) - 1] if n > 1 else 0.0  # beyond 10 seeds: 2.228 (conservative)
            summary[variant][metric] = {"mean": mean, "std": std, "ci95": t * std / math.sqrt(n), "n": n,
                                        "values": values}
    return summary
