"""COLA multi-object accuracy as an `evaluate` metric, a thin wrapper over `hf_longclip.metrics.cola.cola_multi`."""

import datasets
import evaluate

from hf_longclip.metrics import checked  # the module: evaluate takes the first Metric class it finds here
from hf_longclip.metrics.cola import cola_multi

_DESCRIPTION = """\
COLA multi-object setting (Ray et al., NeurIPS 2023): each example is two images and two captions whose objects'
attributes are swapped; caption c describes image c. As `ColaMultiObjAcc` in the authors' scripts/eval.py
(github.com/arijitray1993/COLA), an example is correct iff each caption scores strictly higher with its own image
than with the other image: s[0][0] > s[1][0] and s[1][1] > s[0][1] (`direction="text_to_image"`, the default).
`direction="image_to_text"` asks instead that each image prefer its own caption, and `"group"` both. A tied
comparison counts wrong by default (`tie_rule="pessimistic"`, as the strict `>` of `ColaMultiObjAcc`, commit
1fa52fb: the official numbers); `"fair"` counts it 1/2 (the chance of winning it when the tie is broken at random,
the comparisons independent), `"optimistic"` right, `"first"` / `"last"` to the image (caption) of lower / higher
index. Accuracy in percent.
"""

_CITATION = """\
@inproceedings{ray2023cola,
  author    = {Ray, Arijit and Radenovic, Filip and Dubey, Abhimanyu and Plummer, Bryan A. and Krishna, Ranjay and
               Saenko, Kate},
  title     = {Cola: A Benchmark for Compositional Text-to-image Retrieval},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {36},
  pages     = {46433--46445},
  year      = {2023}
}
"""

_KWARGS_DESCRIPTION = """
Args:
    scores (`list` of 2 x 2 `list` of `float`): per example, scores[image][caption], the match score of image i
        with caption c.
    direction (`str`, *optional*, defaults to `"text_to_image"`): `"text_to_image"` (COLA's metric),
        `"image_to_text"` or `"group"`.
    tie_rule (`str`, *optional*, defaults to `"pessimistic"`): how tied scores are credited: `"pessimistic"`
        (against the query, COLA's strict `>`), `"fair"` (the expected credit when ties are broken at random),
        `"optimistic"` (in the query's favour), `"first"` / `"last"` (by position).
Returns:
    accuracy (`float`): percent of examples matched correctly.
    num_samples (`int`): number of examples.
    tie_rule (`str`): the tie rule used.
Examples:
    >>> metric = evaluate.load("cola_multi")
    >>> metric.compute(scores=[[[0.3, 0.2], [0.1, 0.4]], [[0.3, 0.35], [0.1, 0.4]], [[0.3, 0.2], [0.3, 0.4]]])
    {'accuracy': 66.66666666666666, 'num_samples': 3, 'tie_rule': 'pessimistic'}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ColaMulti(checked.CheckedMetric):
    """COLA multi-object matching accuracy over (N, 2, 2) image-caption scores."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"scores": datasets.List(datasets.List(datasets.Value("float64")))}),
            reference_urls=["https://arxiv.org/abs/2305.03689", "https://github.com/arijitray1993/COLA"],
        )

    def _compute(self, scores, direction="text_to_image", tie_rule="pessimistic"):
        return cola_multi(scores, direction=direction, tie_rule=tie_rule)
