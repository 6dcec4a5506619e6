"""Long-text image-text retrieval Recall@K as an `evaluate` metric, a thin wrapper over
`hf_longclip.metrics.retrieval.long_text_retrieval`."""

import datasets
import evaluate

from hf_longclip.metrics import checked  # the module: evaluate takes the first Metric class it finds here
from hf_longclip.metrics.citations import HIMO_CLIP
from hf_longclip.metrics.retrieval import long_text_retrieval

_DESCRIPTION = """\
Image-text retrieval Recall@K with one or more captions per image (COCO and Flickr30K have 5, Urban1k, DOCCI and
ShareGPT4V one long caption), as reported by HiMo-CLIP (Tables 1-2), OneLIP (Tables 1-2), DITM (Sec. IV-B) and
F-CAST (Table 1). Scores are dot products of the embeddings, i.e. cosine similarities for L2-normalised embeddings
(pass normalised ones). Image-to-text: an image is a hit at K if any of its captions is among its K best-scored
texts; text-to-image: a caption is a hit at K if its image is among its K best-scored images. Tied scores get their
expected credit under random tie-breaking by default (`tie_rule="fair"`: a positive with g candidates above it and
t negatives tied with it counts (K - g) / (t + 1), clipped to [0, 1]); `"optimistic"` counts ties as hits,
`"pessimistic"` as misses; `"first"` breaks them by index, the lower first (`torch.argmax` and CUDA top-k: the
Urban1k, DOCCI and Flickr30k codes of Long-CLIP, HiMo-CLIP and TULIP), `"last"` the higher first
(`argsort()[-K:]`: their COCO code), candidates in the order given; `hf-longclip eval` applies each benchmark
protocol's own rule (docs/evaluation.md). The number of queries with a tie is returned, and embeddings whose rows are
mostly duplicates (a collapsed model) raise a `DegenerateEmbeddingsWarning`. RSUM is the sum of the recalls. Computed
over chunks of queries, never materialising the full similarity matrix.

One row per caption: its embedding and the index of its image; the image embeddings are a keyword argument.
Embeddings are stored as float32 and handed over as Python lists: for very large sets (e.g. 150k captions) call
`hf_longclip.metrics.long_text_retrieval` on tensors directly.
"""

_CITATION = """\
@inproceedings{faghri2018vse,
  author    = {Faghri, Fartash and Fleet, David J. and Kiros, Jamie Ryan and Fidler, Sanja},
  title     = {{VSE++}: Improving Visual-Semantic Embeddings with Hard Negatives},
  booktitle = {Proceedings of the British Machine Vision Conference (BMVC)},
  year      = {2018}
}
""" + HIMO_CLIP

_KWARGS_DESCRIPTION = """
Args:
    text_embeds (`list` of `list` of `float`): one embedding per caption, shape (num_texts, d).
    text_to_image (`list` of `int`): the index of each caption's image in `image_embeds`.
    image_embeds (`list` of `list` of `float`, `numpy.ndarray` or `torch.Tensor`): shape (num_images, d); every
        image needs at least one caption.
    ks (`tuple` of `int`, *optional*, defaults to `(1, 5, 10)`): the K of Recall@K.
    chunk_size (`int`, *optional*): queries scored at a time; by default as many as fit 2**24 scores.
    tie_rule (`str`, *optional*, defaults to `"fair"`): how tied scores are credited: `"fair"` (the expected
        credit when ties are broken at random), `"optimistic"` (in the query's favour), `"pessimistic"` (against),
        `"first"` / `"last"` (by index: the lower / higher first).
Returns:
    r1_i2t, r5_i2t, r10_i2t (`float`): image-to-text Recall@K in percent (keys follow `ks`).
    r1_t2i, r5_t2i, r10_t2i (`float`): text-to-image Recall@K in percent.
    rsum (`float`): sum of the recalls.
    num_images (`int`), num_texts (`int`).
    ties_i2t, ties_t2i (`int`): queries whose best positive ties with a negative candidate.
    tie_rule (`str`): the tie rule used.
Examples:
    >>> retrieval = evaluate.load("long_text_retrieval")
    >>> result = retrieval.compute(text_embeds=[[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], text_to_image=[0, 1, 1],
    ...                            image_embeds=[[1.0, 0.0], [0.0, 1.0]], ks=(1,))
    >>> result["r1_i2t"], result["r1_t2i"], result["rsum"]
    (100.0, 100.0, 200.0)
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class LongTextRetrieval(checked.CheckedMetric):
    """Recall@K both ways with several captions per image, computed in bounded memory."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"text_embeds": datasets.List(datasets.Value("float32")), "text_to_image": datasets.Value("int64")}
            ),
            reference_urls=["https://arxiv.org/abs/1707.05612", "https://arxiv.org/abs/2511.06653"],
        )

    def _compute(self, text_embeds, text_to_image, image_embeds=None, ks=(1, 5, 10), chunk_size=None,
                 tie_rule="fair"):
        if image_embeds is None:
            raise ValueError("image_embeds is required: pass image_embeds=... to compute()")
        return long_text_retrieval(image_embeds, text_embeds, text_to_image, ks=ks, chunk_size=chunk_size,
                                   tie_rule=tie_rule)
