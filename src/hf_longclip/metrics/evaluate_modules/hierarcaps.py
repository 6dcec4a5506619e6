"""HierarCaps hierarchical retrieval metrics as an `evaluate` metric, a thin wrapper over
`hf_longclip.metrics.hierarcaps.hierarcaps`."""

import datasets
import evaluate

from hf_longclip.metrics import checked  # the module: evaluate takes the first Metric class it finds here
from hf_longclip.metrics.hierarcaps import hierarcaps, text_pool

_DESCRIPTION = """\
HierarCaps (Alper & Averbuch-Elor, ECCV 2024) evaluates visual-semantic hierarchies with 4-level caption chains
(generic -> specific, e.g. "food" => "hot dog" => "hot dog on plate" => "a hot dog on a plate next to two glasses").
As the authors' code (github.com/TAU-VAILab/hierarcaps, code/evaluation/hierarchical_retrieval.py): all embeddings
are L2-normalised; a text's radius is its distance to the root (the embedding of ""); at each of 50 radius
thresholds evenly spaced between the smallest and largest radius, each image retrieves its most similar text among
those within the threshold; precision and per-level recall compare the retrieved texts with the image's chains by
exact string match; d_corr is the mean Kendall tau between the radii of a chain's texts and their levels.
Ties follow `tie_rule`. The default, "first", is the code's (`HCEvaluator.run`, commit ab0166c), which breaks ties
by position: distinct texts with one embedding (e.g. captions equal up to the token limit) retrieve the first of
them in pool order (`argmax`), and a pair of tied radii counts as in order (`kendalltau(radii.argsort(), [1, 2, 3,
4])`, a stable argsort): with it the numbers are the official evaluator's. "fair" is the expectation under random
tie-breaking (a tied pair of radii counts 0, a group of texts with one embedding is one retrieved text, a hit in
proportion to its true members); "optimistic" / "pessimistic" count ties in favour / against, "last" breaks them by
position the other way (d_corr_method="tau_b" uses tau-b instead, which counts tied radii as neither).
d_corr_image is DITM's variant (Jang et al. 2025, Sec. IV-B): the order of the distances to the chain's image, +1
when the most specific text is closest, ties treated alike.

One row per chain: the embeddings of its 4 texts, the texts themselves (equal strings are the same text; the
searched pool is every distinct text of every chain) and the index of its image; the image embeddings and the
root embedding are keyword arguments. Embeddings are stored as float32.
"""

_CITATION = """\
@inproceedings{alper2024emergent,
  author    = {Alper, Morris and Averbuch-Elor, Hadar},
  title     = {Emergent Visual-Semantic Hierarchies in Image-Text Representations},
  booktitle = {European Conference on Computer Vision (ECCV)},
  year      = {2024},
  eprint    = {2407.08521},
  archivePrefix = {arXiv},
  url       = {https://arxiv.org/abs/2407.08521}
}
@article{jang2025descriptive,
  author    = {Jang, Jinhyun and Lee, Jiyoung and Sohn, Kwanghoon},
  title     = {Descriptive Image-Text Matching with Graded Contextual Similarity},
  journal   = {arXiv preprint arXiv:2505.09997},
  year      = {2025},
  url       = {https://arxiv.org/abs/2505.09997}
}
"""

_KWARGS_DESCRIPTION = """
Args:
    chain_embeds (`list` of `list` of `list` of `float`): per chain, the embeddings of its 4 texts (4, d).
    chain_texts (`list` of `list` of `str`): per chain, its 4 texts, level 1 (generic) to level 4 (specific).
    chain_to_image (`list` of `int`): per chain, the index of its image in `image_embeds` (an image may have
        several chains; every image needs one).
    image_embeds (`list` of `list` of `float`, `numpy.ndarray` or `torch.Tensor`): shape (num_images, d).
    root_embed (`list` of `float`, `numpy.ndarray` or `torch.Tensor`): the text embedding of "", shape (d,).
    num_thresholds (`int`, *optional*, defaults to 50): the number of radius thresholds.
    d_corr_method (`str`, *optional*, defaults to `"official"`): `"official"` (Kendall's tau over all pairs, as
        the HierarCaps code, tied pairs credited by `tie_rule`) or `"tau_b"` (Kendall's tau-b: a tie counts as
        neither).
    tie_rule (`str`, *optional*, defaults to `"first"`): how tied scores are credited: `"first"` (by position, as
        the HierarCaps code: its numbers), `"fair"` (the expected credit when ties are broken at random),
        `"optimistic"` (in the query's favour), `"pessimistic"` (against) or `"last"` (by position, reversed).
Returns:
    precision (`float`), recall (`float`), recall_level_1 .. recall_level_4 (`float`): fractions in [0, 1].
    d_corr (`float`), d_corr_image (`float`): mean Kendall tau in [-1, 1].
    tie_rule (`str`): the tie rule used.
    num_images (`int`), num_chains (`int`).
Examples:
    >>> metric = evaluate.load("hierarcaps")
    >>> result = metric.compute(
    ...     chain_embeds=[[[1.0, 0.1, 0.0], [1.0, 0.5, 0.0], [1.0, 1.0, 0.0], [1.0, 2.0, 0.0]]],
    ...     chain_texts=[["food", "hot dog", "hot dog on plate", "a hot dog on a plate next to two glasses"]],
    ...     chain_to_image=[0], image_embeds=[[0.5, 1.0, 0.0]], root_embed=[1.0, 0.0, 0.0])
    >>> result["d_corr"], result["recall_level_3"]
    (1.0, 1.0)
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class HierarCaps(checked.CheckedMetric):
    """HierarCaps precision, per-level recall, d_corr (radius order) and DITM's d_corr to the image."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "chain_embeds": datasets.List(datasets.List(datasets.Value("float32"))),
                    "chain_texts": datasets.List(datasets.Value("string")),
                    "chain_to_image": datasets.Value("int64"),
                }
            ),
            reference_urls=["https://github.com/TAU-VAILab/hierarcaps", "https://arxiv.org/abs/2505.09997"],
        )

    def _compute(self, chain_embeds, chain_texts, chain_to_image, image_embeds=None, root_embed=None,
                 num_thresholds=50, d_corr_method="official", tie_rule="first"):
        if image_embeds is None or root_embed is None:
            raise ValueError("image_embeds and root_embed are required: pass them to compute()")
        _, text_embeds, chains = text_pool([[str(t) for t in chain] for chain in chain_texts], chain_embeds)
        return hierarcaps(image_embeds, text_embeds, chains, root_embed, chain_to_image=chain_to_image,
                          num_thresholds=num_thresholds, d_corr_method=d_corr_method, tie_rule=tie_rule)
