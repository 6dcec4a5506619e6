"""The base of the library's `evaluate` metrics: `compute` names a mistyped or missing argument itself (evaluate
alone answers a misspelt input with an unrelated error: a missing cache file, or `len()` of None)."""

from __future__ import annotations

import inspect

import evaluate


class CheckedMetric(evaluate.Metric):
    """An `evaluate.Metric` whose `compute` refuses keywords that are neither an input (a feature) nor an option of
    `_compute`, and, when no batch was added, inputs left out; each refusal lists what the metric takes."""

    def compute(self, **kwargs):
        """The metric over the given inputs (and those added before), with its options; keywords only."""
        inputs = list(self._feature_names())
        options = [name for name in inspect.signature(self._compute).parameters if name not in inputs]
        takes = f"{type(self).__name__} takes the inputs {inputs} and the options {options}"
        unknown = sorted(set(kwargs) - set(inputs) - set(options))
        if unknown:
            raise TypeError(f"unknown argument(s) {unknown}: {takes}")
        missing = [name for name in inputs if kwargs.get(name) is None]
        if missing and self.writer is None and self.buf_writer is None:  # nothing added by add / add_batch
            raise ValueError(f"missing input(s) {missing}: {takes} (or add them first with add_batch)")
        return super().compute(**kwargs)
