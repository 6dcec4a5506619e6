"""Semantic Stability Index (HiMo-CLIP Eq. 22) as an `evaluate` metric, a thin wrapper over
`hf_longclip.metrics.ssi.ssi`."""

import datasets
import evaluate

from hf_longclip.metrics import checked  # the module: evaluate takes the first Metric class it finds here
from hf_longclip.metrics.citations import HIMO_CLIP
from hf_longclip.metrics.ssi import ssi

_DESCRIPTION = """\
The Semantic Stability Index (HiMo-CLIP, Appendix C.3, Eq. 22) measures the relative change of image-text
similarity when an unrelated sentence is inserted into a caption:
SSI = 1/N sum_i 1/M_i sum_j |s_{j,ori} - s_{j,noise}| / s_{j,ori} x 100, over N samples with M_i hierarchical
subtexts each. Lower is more robust. Original scores must be positive.
"""

_CITATION = HIMO_CLIP

_KWARGS_DESCRIPTION = """
Args:
    original_scores (`list` of `list` of `float`): per sample, the scores of its subtexts with the image before
        noise insertion (lists may differ in length between samples; every score > 0).
    noisy_scores (`list` of `list` of `float`): the same subtexts' scores after noise insertion, same lengths.
Returns:
    ssi (`float`): the Semantic Stability Index (percent relative change; lower is better).
    num_samples (`int`): N.
    num_subtexts (`int`): sum of the M_i.
Examples:
    >>> metric = evaluate.load("ssi")
    >>> metric.compute(original_scores=[[0.5, 0.25], [0.5]], noisy_scores=[[0.375, 0.25], [0.75]])["ssi"]
    31.25
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SemanticStabilityIndex(checked.CheckedMetric):
    """SSI (HiMo-CLIP Eq. 22) over ragged lists of subtext scores."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "original_scores": datasets.List(datasets.Value("float64")),
                    "noisy_scores": datasets.List(datasets.Value("float64")),
                }
            ),
            reference_urls=["https://arxiv.org/abs/2511.06653"],
        )

    def _compute(self, original_scores, noisy_scores):
        return ssi(original_scores, noisy_scores)
