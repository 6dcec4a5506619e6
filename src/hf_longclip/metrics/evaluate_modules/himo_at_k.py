"""HiMo@K as an `evaluate` metric, a thin wrapper over `hf_longclip.metrics.himo.himo_at_k`."""

import datasets
import evaluate

from hf_longclip.metrics import checked  # the module: evaluate takes the first Metric class it finds here
from hf_longclip.metrics.citations import HIMO_CLIP
from hf_longclip.metrics.himo import himo_at_k

_DESCRIPTION = """\
HiMo@K measures whether the image-text matching score grows monotonically as a long caption is revealed
segment by segment (HiMo-CLIP, Sec. 4.2). A caption of n sentences is cut into K contiguous segments;
t_k is the concatenation of the first k segments and s_{t_k} its score with the image.
For K > 3 (Eq. 5) HiMo@K is the Pearson correlation between k = 1..K and s_{t_k}, averaged over images;
for K = 2 or 3 (Eq. 6) it is the percentage of images whose scores strictly increase; equal scores count by default
as the chance that random tie-breaking orders them increasingly (`tie_rule="fair"`: 1/2 for two equal scores;
HiMo-CLIP's released code computes the Pearson HiMo@K only, so Eq. 6 has no official tie-break),
`"optimistic"` and `"first"` (in prefix order) as increasing, `"pessimistic"` (Eq. 6 read literally) and `"last"`
as not.
"""

_CITATION = HIMO_CLIP

_KWARGS_DESCRIPTION = """
Args:
    scores (`list` of `list` of `float`): one list per image, the scores s_{t_1}..s_{t_K} of its cumulative
        caption prefixes; lists may have different lengths (at least 2).
    method (`str`, *optional*): `"pearson"` (Eq. 5) or `"accuracy"` (Eq. 6) to force one definition for
        every list; by default lists longer than 3 use Pearson, lists of 2 or 3 use accuracy, and a batch
        mixing both raises a ValueError.
    tie_rule (`str`, *optional*, defaults to `"fair"`): how tied scores are credited: `"fair"` (the expected
        credit when ties are broken at random), `"optimistic"` (in the query's favour), `"pessimistic"` (against),
        `"first"` / `"last"` (by index: the lower / higher first).
Returns:
    himo_at_k (`float`): mean Pearson correlation in [-1, 1], or the percentage of monotonic lists.
    method (`str`): the definition used, `"pearson"` or `"accuracy"`.
    num_samples (`int`): number of images.
    num_constant (`int`): number of constant score lists (they count as a correlation of 0).
    tie_rule (`str`): the tie rule used.
Examples:
    >>> himo = evaluate.load("himo_at_k")
    >>> himo.compute(scores=[[0.1, 0.2, 0.3, 0.4], [0.3, 0.2, 0.25, 0.1, 0.5]])["method"]
    'pearson'
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class HimoAtK(checked.CheckedMetric):
    """HiMo@K (HiMo-CLIP Eqs. 5 and 6) over ragged lists of prefix scores."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"scores": datasets.Sequence(datasets.Value("float64"))}),
            reference_urls=["https://arxiv.org/abs/2511.06653"],
        )

    def _compute(self, scores, method=None, tie_rule="fair"):
        return himo_at_k(scores, method=method, tie_rule=tie_rule)
