"""The retrieval scoring modes (`hf_longclip.evaluation.scoring`) against FLAIR's own retrieval computation.

Reference: ExplainableML/flair at commit 0f9ce05886d1ee0aa2c628653104cce77a1fff14, file src/flair/train.py:
`retrieval_on_split` (the text side: `encode_text` then `text_post`, the queries unnormalised, the features
normalised), `compute_similarity_scores_attn_pool` (modes `inference_with_flair`, `inference_with_flair_topk`,
`direct_global_matching`; images one at a time, as its retrieval loaders give them), `compute_retrieval` and
`compute_retrieval_topk`, transcribed below on the released-layout tiny FLAIR of the conversion tests
(`FlairReference`: FLAIR's `encode_image`, `encode_text`, `image_post`, `text_post`, `visual_proj`). Our side is
`evaluate_dataset` on that checkpoint converted by `convert_flair`, images and captions through its processor.

FLAIR ranks with `torch.argsort(descending=True)`, which on the CPU orders ties (the -1e10 of the pairs top-k did
not re-score) by index for up to 16 entries: the set here has 6 images and 15 captions, so the transcription is
deterministic, and the test checks that its sort is the stable one.
"""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conversion.test_convert_tulip_flair import CLIP_VOCAB, FlairReference, randomize
from datasets import Dataset
from PIL import Image

from helpers.conversion import open_clip_bpe_file
from hf_longclip.evaluation import evaluate_dataset
from hf_longclip.evaluation.scoring import (
    _chunks,
    check_scoring,
    conditioned_score_matrix,
    score_matrix_retrieval,
    unscored_floor,
)
from hf_longclip.models.conversion import clip_tokenizer, load_original_checkpoint
from hf_longclip.models.fcast.convert_flair import convert as convert_flair

WORDS = "red blue green small large dog cat tree car house river cloud street boat bird".split()
CAPTIONS_PER_IMAGE = (3, 2, 3, 2, 3, 2)  # 6 images, 15 captions: FLAIR's argsort is stable up to 16 entries
TOPK = 4  # below 10: R@5/R@10 also rank pairs top-k did not re-score


# ------------------------------------------------- transcription of ExplainableML/flair src/flair/train.py @ 0f9ce05
def flair_compute_retrieval(similarity_scores, txt2img, img2txt):
    """`compute_retrieval`: ranks by argsort, an image's rank the best of its captions'; fractions."""
    t2i_similarity_score, i2t_similarity_score = similarity_scores.t(), similarity_scores
    t2i_ranks = torch.zeros(t2i_similarity_score.shape[0])
    for index, score in enumerate(t2i_similarity_score):
        inds = torch.argsort(score, descending=True)
        t2i_ranks[index] = torch.where(inds == txt2img[index])[0][0]
    i2t_ranks = torch.zeros(i2t_similarity_score.shape[0])
    for index, score in enumerate(i2t_similarity_score):
        inds = torch.argsort(score, descending=True)
        rank = 1e10
        for i in img2txt[index]:
            tmp = torch.where(inds == i)[0][0]
            if tmp < rank:
                rank = tmp
        i2t_ranks[index] = rank
    metrics = {}
    for k in (1, 5, 10):
        metrics[f"text_to_image_R@{k}"] = len(torch.where(t2i_ranks < k)[0]) / len(t2i_ranks)
        metrics[f"image_to_text_R@{k}"] = len(torch.where(i2t_ranks < k)[0]) / len(i2t_ranks)
    return metrics


def flair_compute_retrieval_topk(similarity_scores, txt2img, img2txt, topk_indices, num_texts, num_images):
    i2t_similarity_score = torch.full((num_images, num_texts), -1e10, dtype=similarity_scores.dtype)
    for i in range(num_images):
        i2t_similarity_score[i, topk_indices[i]] = similarity_scores[i]
    return flair_compute_retrieval(i2t_similarity_score, txt2img, img2txt)


@torch.no_grad()
def flair_retrieval(model, pixel_values, text_ids, txt2img, img2txt, mode, top_k=0):
    """`retrieval_on_split` with `compute_similarity_scores_attn_pool`, images one by one."""
    global_text_token = model.text_post(model.encode_text(text_ids))
    all_text_features_tensor = F.normalize(global_text_token, dim=-1)
    logit_scale = model.logit_scale.exp()
    logits, topk_ids = [], []
    for images in pixel_values.split(1):
        global_image, image_embeddings = model.encode_image(images)
        image_embeddings = model.image_post(image_embeddings)
        if mode == "inference_with_flair":
            conditioned = F.normalize(model.visual_proj(global_text_token.unsqueeze(0), image_embeddings,
                                                        image_embeddings), dim=-1).view(-1, image_embeddings.shape[-1])
            logits.append((logit_scale * torch.einsum("ij,ij->i", conditioned, all_text_features_tensor))[None])
        elif mode == "inference_with_flair_topk":
            g = F.normalize(model.image_post(global_image), dim=-1)
            sim_g2t = g @ all_text_features_tensor.t()
            for b in range(sim_g2t.size(0)):
                _, topk_idx = sim_g2t[b].topk(k=top_k, dim=-1)
                topk_ids.append(topk_idx[None])
                img_feat_k = F.normalize(model.visual_proj(global_text_token[topk_idx][None], image_embeddings[b:b + 1],
                                                           image_embeddings[b:b + 1]).squeeze(0), dim=-1)
                logits.append((logit_scale * torch.einsum("ij,ij->i", img_feat_k, all_text_features_tensor[topk_idx]))
                              [None])
        else:  # direct_global_matching
            g = F.normalize(model.image_post(global_image), dim=-1)
            logits.append(logit_scale * g @ all_text_features_tensor.t())
    similarity_scores = torch.cat(logits)
    if mode == "inference_with_flair_topk":
        return flair_compute_retrieval_topk(similarity_scores, txt2img, img2txt, torch.cat(topk_ids),
                                            len(text_ids), len(pixel_values))
    return flair_compute_retrieval(similarity_scores, txt2img, img2txt)
# ------------------------------------------------------------------------------------------------ end of transcription


def captions() -> list[list[str]]:
    rng = np.random.default_rng(11)
    return [[" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) for _ in range(count)]
            for count in CAPTIONS_PER_IMAGE]


@pytest.fixture(scope="module")
def flair(tmp_path_factory):
    torch.manual_seed(12)
    reference = FlairReference(vocab=CLIP_VOCAB).eval()
    randomize(reference, seed=13)
    path = tmp_path_factory.mktemp("flair") / "flair-cc3m-recap.pt"
    torch.save(reference.state_dict(), path)
    model, processor = convert_flair(load_original_checkpoint(path),
                                     clip_tokenizer(bpe_file=open_clip_bpe_file(), max_length=77))
    images = [Image.fromarray(np.random.default_rng(20 + i).integers(0, 256, (40, 48, 3), dtype=np.uint8))
              for i in range(len(CAPTIONS_PER_IMAGE))]
    dataset = Dataset.from_dict({"image": images, "caption": [group[0] for group in captions()],
                                 "captions": captions()})
    return reference, model.eval(), processor, dataset


def reference_inputs(processor, dataset):
    """The pixels and the ids our processor gives, the ids zero-padded to FLAIR's 77 positions."""
    texts = [text for group in dataset["captions"] for text in group]
    encoded = processor(text=texts, padding="longest")
    ids = encoded["input_ids"].reshape(len(texts), -1) * encoded["attention_mask"].reshape(len(texts), -1)
    ids = F.pad(ids, (0, 77 - ids.shape[1]))
    pixels = processor(images=list(dataset["image"]), return_tensors="pt")["pixel_values"]
    owners = [i for i, group in enumerate(dataset["captions"]) for _ in group]
    img2txt = {i: [t for t, owner in enumerate(owners) if owner == i] for i in range(len(dataset))}
    return pixels, ids, dict(enumerate(owners)), img2txt


FLAIR_MODES = {"global": "direct_global_matching", "conditioned": "inference_with_flair",
               "conditioned-topk": "inference_with_flair_topk"}


@pytest.mark.parametrize("scoring", list(FLAIR_MODES))
def test_recalls_equal_flairs_retrieval_code(flair, scoring):
    """R@1/5/10 both ways equal FLAIR's `compute_retrieval` (top-k: `compute_retrieval_topk`) in each mode, with
    two and three captions per image (an image is found by the best of its captions)."""
    reference, model, processor, dataset = flair
    pixels, ids, txt2img, img2txt = reference_inputs(processor, dataset)
    theirs = flair_retrieval(reference, pixels, ids, txt2img, img2txt, FLAIR_MODES[scoring], TOPK)
    ours = evaluate_dataset(model, processor, dataset, ["retrieval"], batch_size=4, progress=False, scoring=scoring,
                            topk=TOPK)["retrieval"]
    pairs = {f"r{k}_{ours_key}": f"{their_key}_R@{k}" for k in (1, 5, 10)
             for ours_key, their_key in (("i2t", "image_to_text"), ("t2i", "text_to_image"))}
    print(scoring, {key: (ours[key], 100 * theirs[their]) for key, their in pairs.items()})
    expected = {key: 100 * theirs[their] for key, their in pairs.items()}
    assert {key: ours[key] for key in pairs} == pytest.approx(expected)
    assert ours["num_texts"] == sum(CAPTIONS_PER_IMAGE) and ours.get("scoring", "global") == scoring


def test_the_transcriptions_argsort_is_stable_here():
    """FLAIR's unstable argsort orders the -1e10 ties by index at these sizes (so does `unscored_floor`)."""
    scores = torch.full((15,), -1e10)
    scores[[3, 9]] = torch.tensor([0.5, 0.2])
    assert torch.argsort(scores, descending=True).tolist() == [3, 9, *(i for i in range(15) if i not in (3, 9))]


def test_modes_score_differently(flair):
    """The three modes rank differently on this set (so the equalities above compare different computations),
    and top-k re-scores exactly the all-pairs scores of the pairs it keeps."""
    _, model, processor, dataset = flair
    texts = [text for group in dataset["captions"] for text in group]
    from hf_longclip.evaluation import encode_images, encode_texts

    queries = encode_texts(model, processor, texts, normalize=False)
    every = conditioned_score_matrix(model, processor, list(dataset["image"]), queries, pairs_per_chunk=7)
    top = conditioned_score_matrix(model, processor, list(dataset["image"]), queries, topk=TOPK, batch_size=4)
    global_scores = encode_images(model, processor, list(dataset["image"])) @ F.normalize(queries, dim=-1).T
    kept = top > -2
    assert (kept.sum(dim=1) == TOPK).all()
    assert kept.equal(torch.zeros_like(kept).scatter_(1, global_scores.topk(TOPK).indices, True))
    torch.testing.assert_close(top[kept], every[kept], rtol=1e-5, atol=1e-6)
    assert not torch.equal(every.argsort(dim=1), global_scores.argsort(dim=1))


class CountingPool(torch.nn.Module):
    """Wraps a model's `grounding_pool`, recording the (images, texts) block of each call."""

    def __init__(self, pool):
        super().__init__()
        self.pool, self.blocks = pool, []

    def forward(self, queries, tokens, padding=None):
        self.blocks.append(tuple(queries.shape[:2]))
        return self.pool(queries, tokens, padding)


def test_blocks_are_bounded_and_topk_touches_k_texts_per_image(flair):
    _, shared, processor, dataset = flair
    texts = [text for group in dataset["captions"] for text in group]
    from hf_longclip.evaluation import encode_texts

    model = copy.deepcopy(shared)  # the counting pool goes into a copy: the module's model stays as converted
    queries = encode_texts(model, processor, texts, normalize=False)
    counter = CountingPool(model.grounding_pool)
    model.grounding_pool = counter
    conditioned_score_matrix(model, processor, list(dataset["image"]), queries, batch_size=4, pairs_per_chunk=10)
    assert max(rows * columns for rows, columns in counter.blocks) <= 10
    assert sum(rows * columns for rows, columns in counter.blocks) == len(dataset) * len(texts)
    counter.blocks.clear()
    conditioned_score_matrix(model, processor, list(dataset["image"]), queries, topk=TOPK, batch_size=4)
    assert sum(rows * columns for rows, columns in counter.blocks) == len(dataset) * TOPK


def test_chunks_cover_the_grid_once():
    for rows, columns, budget in ((5, 7, 10), (3, 40, 16), (9, 2, 1), (4, 4, 100)):
        seen = torch.zeros(rows, columns, dtype=torch.long)
        for row, column in _chunks(rows, columns, budget):
            seen[row, column] += 1
            assert (row.stop - row.start) * (column.stop - column.start) <= budget
        assert (seen == 1).all()


def test_score_matrix_retrieval_ranks_the_scores_exactly():
    """One-hot images against the score columns give the matrix back: the recalls of a hand-made case (image 0's
    captions 0 and 1, image 1's caption 2)."""
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.2, 0.4]])
    result = score_matrix_retrieval(scores, [0, 0, 1], ks=(1,))
    # I2T: image 0's best text is its caption 1 (hit); image 1's best is text 2, its own (hit).
    # T2I: text 0 -> image 1 (0.3 > 0.1, miss); text 1 -> image 0 (hit); text 2 -> image 0 (0.5 > 0.4, miss)
    assert result["r1_i2t"] == 100 and result["r1_t2i"] == pytest.approx(100 / 3)


def test_unscored_pairs_rank_below_in_index_order():
    floor = unscored_floor(3, 4)
    assert floor.max() < -1 and (floor.diff(dim=1) < 0).all() and (floor.diff(dim=0) < 0).all()


def test_a_model_without_conditioned_pooling_is_refused(flair):
    from transformers import CLIPConfig, CLIPModel

    clip = CLIPModel(CLIPConfig(text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2),
                                vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                   num_attention_heads=2, image_size=16, patch_size=8)))
    with pytest.raises(ValueError, match="CLIPModel has none"):
        check_scoring(clip, "conditioned")
    check_scoring(clip, "global")
    _, model, _, _ = flair
    with pytest.raises(ValueError, match="unknown scoring"):
        check_scoring(model, "local")
    with pytest.raises(ValueError, match="topk"):
        check_scoring(model, "conditioned-topk", 0)


def test_cli_eval_scores_conditioned_and_refuses_a_model_without_pooling(flair, tmp_path, capsys):
    """`hf-longclip eval --scoring conditioned-topk --topk 3` on the converted checkpoint records its mode; a plain
    CLIPModel asked for conditioned scoring is refused with one line before the benchmark is generated."""
    import json

    from transformers import CLIPImageProcessorPil, CLIPProcessor

    from helpers.builders import tiny_clip
    from hf_longclip.cli import main

    _, model, processor, _ = flair
    model.save_pretrained(tmp_path / "flair")
    processor.save_pretrained(tmp_path / "flair")
    common = ["--dataset", "synthetic", "--data-dir", str(tmp_path / "synthetic"), "--max-samples", "6",
              "--tasks", "retrieval", "--batch-size", "4"]
    main(["eval", "--model", str(tmp_path / "flair"), *common, "--scoring", "conditioned-topk", "--topk", "3",
          "--output-dir", str(tmp_path / "eval")])
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["scoring"] == "conditioned-topk"
    assert report["metrics"]["retrieval"]["topk"] == 3 and report["metrics"]["retrieval"]["num_images"] == 6

    clip = tmp_path / "clip"
    tiny_clip().save_pretrained(clip)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size=32)
    CLIPProcessor(image_processor, processor.tokenizer).save_pretrained(clip)
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", str(clip), *common, "--scoring", "conditioned", "--data-dir", str(tmp_path / "other")])
    assert exit_info.value.code == 2
    assert "CLIPModel has none" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_fcast_scores_conditioned_over_its_segments_with_a_note():
    """F-CAST (CAST's padded segments, the hierarchical text encoder's t^long as the query): conditioned scoring
    runs, top-k re-scores the same values, and the result says it is not F-CAST's own inference."""
    from helpers.fcast import CAPTIONS, random_images, tiny_fcast, tiny_processor

    model, processor = tiny_fcast(seed=1).eval(), tiny_processor()
    rows = Dataset.from_dict({"image": random_images(4), "caption": CAPTIONS})
    every = evaluate_dataset(model, processor, rows, ["retrieval"], progress=False, scoring="conditioned")["retrieval"]
    assert every["scoring_note"].startswith("text-conditioned scoring is not F-CAST's inference")
    assert every["num_texts"] == 4 and 0 <= every["r1_i2t"] <= 100
    from hf_longclip.evaluation import encode_texts

    queries = encode_texts(model, processor, CAPTIONS, normalize=False)
    full = conditioned_score_matrix(model, processor, random_images(4), queries)
    top = conditioned_score_matrix(model, processor, random_images(4), queries, topk=2)
    torch.testing.assert_close(top[top > -2], full[top > -2], rtol=1e-5, atol=1e-6)
