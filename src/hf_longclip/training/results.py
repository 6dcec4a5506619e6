"""The results tables the example scripts print, and their summary over seeds: mean, standard deviation and 95%
confidence interval of every metric of every variant (`--seeds`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def _cell(value) -> str:
    """A table cell: a number, or a seed summary as mean +- std (mean alone for one seed)."""
    if isinstance(value, Mapping):
        return f"{value['mean']:.3f}" if value["n"] == 1 else f"{value['mean']:.3f}±{value['std']:.3f}"
    return f"{value:.3f}"


def format_table(results: Mapping[str, Mapping], metrics: Sequence[str]) -> str:
    """One row per variant, one column per metric; cells are numbers or `summarize_seeds` summaries."""
    cells = {variant: [_cell(values[name]) for name in metrics] for variant, values in results.items()}
    width = max([12, *(len(variant) + 2 for variant in results)])
    columns = [max(10, len(name) + 2, *(len(row[i]) + 2 for row in cells.values())) for i, name in enumerate(metrics)]
    header = f"{'model':<{width}}" + "".join(f"{name:>{column}}" for name, column in zip(metrics, columns))
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
