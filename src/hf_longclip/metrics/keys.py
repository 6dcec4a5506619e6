"""One vocabulary of metric names for every result: the metric first, then the direction (``r1_i2t``, ``r5_t2i``,
``ties_i2t``, ``num_queries_t2t``), in `hf-longclip eval` reports, the evaluate modules, the example scripts'
results and their tables (`hf_longclip.training.results.COLUMNS`). Names written before (``i2t_r1``, ``i2t_ties``,
``t2t_num_queries``) are read by `upgrade_keys`, with a DeprecationWarning."""

from __future__ import annotations

import re
import warnings

_LEGACY = re.compile(r"(i2t|t2i|t2t|i2i)_(r\d+|ties|num_queries|num_without_positive)")


def current_key(key: str) -> str:
    """The current name of a metric key: ``i2t_r1`` -> ``r1_i2t``, ``t2i_ties`` -> ``ties_t2i``; others unchanged."""
    match = _LEGACY.fullmatch(key)
    return f"{match[2]}_{match[1]}" if match else key


def upgrade_keys(results, source: str = "results"):
    """``results`` (nested dicts and lists, e.g. a loaded report) with every old metric key renamed by
    `current_key`; one DeprecationWarning naming ``source`` and the old keys when there were any."""
    renamed: list[str] = []

    def walk(value):
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                new = current_key(key) if isinstance(key, str) else key
                if new != key:
                    renamed.append(key)
                out[new] = walk(item)
            return out
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    upgraded = walk(results)
    if renamed:
        shown = ", ".join(sorted(set(renamed)))
        now = ", ".join(sorted({current_key(key) for key in renamed}))
        warnings.warn(f"{source} uses old metric names ({shown}); read as {now} (the metric first, then the "
                      "direction): the old names will not be read in a future version", DeprecationWarning,
                      stacklevel=2)
    return upgraded
