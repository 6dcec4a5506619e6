"""Zero-shot image classification top-k accuracy as an `evaluate` metric, a thin wrapper over
`hf_longclip.metrics.zero_shot.zero_shot_classification`."""

import datasets
import evaluate

from hf_longclip.metrics import checked  # the module: evaluate takes the first Metric class it finds here
from hf_longclip.metrics.zero_shot import zero_shot_classification

_DESCRIPTION = """\
Zero-shot image classification as in CLIP (Radford et al. 2021) and OneLIP (Table 3): each class is represented by
the prompt-ensemble embedding of its name (see `hf_longclip.metrics.class_embeddings` and `format_prompts`), and
an image is classified as the class of highest similarity. Top-k accuracy in percent; an image counts as correct at
k if its true class is among the k best-scored. A true class with g classes above it and t tied with it counts
(k - g) / (t + 1), clipped to [0, 1], by default (`tie_rule="fair"`, its chance under random tie-breaking);
`"optimistic"` counts g < k, `"pessimistic"` g + t < k, `"first"` / `"last"` rank tied classes by index (the
lower / higher first). The fair default is CLIP_benchmark's rule in expectation: its `accuracy` takes
`logits.topk(5)` on the CPU, which orders tied classes neither way. k larger than the number of classes is an
error.

One row per image: its embedding and its label; the class embeddings are a keyword argument. Embeddings are stored
as float32.
"""

_CITATION = """\
@inproceedings{radford2021learning,
  author    = {Radford, Alec and Kim, Jong Wook and Hallacy, Chris and Ramesh, Aditya and Goh, Gabriel and
               Agarwal, Sandhini and Sastry, Girish and Askell, Amanda and Mishkin, Pamela and Clark, Jack and
               Krueger, Gretchen and Sutskever, Ilya},
  title     = {Learning Transferable Visual Models From Natural Language Supervision},
  booktitle = {Proceedings of the 38th International Conference on Machine Learning},
  series    = {Proceedings of Machine Learning Research},
  volume    = {139},
  pages     = {8748--8763},
  publisher = {PMLR},
  year      = {2021}
}
"""

_KWARGS_DESCRIPTION = """
Args:
    image_embeds (`list` of `list` of `float`): one embedding per image, shape (num_images, d).
    labels (`list` of `int`): the true class index of each image.
    class_embeds (`list` of `list` of `float`, `numpy.ndarray` or `torch.Tensor`): shape (num_classes, d).
    ks (`tuple` of `int`, *optional*, defaults to `(1, 5)`): the k of top-k accuracy (each <= num_classes).
    chunk_size (`int`, *optional*, defaults to 4096): images scored at a time.
    tie_rule (`str`, *optional*, defaults to `"fair"`): how tied scores are credited: `"fair"` (the expected
        credit when ties are broken at random), `"optimistic"` (in the query's favour), `"pessimistic"` (against),
        `"first"` / `"last"` (by index: the lower / higher first).
Returns:
    top1, top5 (`float`): top-k accuracy in percent (keys follow `ks`).
    num_samples (`int`): number of images.
    tie_rule (`str`): the tie rule used.
Examples:
    >>> metric = evaluate.load("zero_shot_classification")
    >>> metric.compute(image_embeds=[[1.0, 0.2], [0.1, 1.0], [1.0, 0.0]], labels=[0, 1, 1],
    ...                class_embeds=[[1.0, 0.0], [0.0, 1.0]], ks=(1, 2))
    {'top1': 66.66666666666666, 'top2': 100.0, 'num_samples': 3, 'tie_rule': 'fair'}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ZeroShotClassification(checked.CheckedMetric):
    """Top-k zero-shot classification accuracy from image and class embeddings."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"image_embeds": datasets.List(datasets.Value("float32")), "labels": datasets.Value("int64")}
            ),
            reference_urls=["https://arxiv.org/abs/2103.00020", "https://github.com/openai/CLIP"],
        )

    def _compute(self, image_embeds, labels, class_embeds=None, ks=(1, 5), chunk_size=4096, tie_rule="fair"):
        if class_embeds is None:
            raise ValueError("class_embeds is required: pass class_embeds=... to compute()")
        return zero_shot_classification(image_embeds, class_embeds, labels, ks=ks, chunk_size=chunk_size,
                                        tie_rule=tie_rule)
