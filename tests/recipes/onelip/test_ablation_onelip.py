"""What train_onelip.py adds around OneLIP: TRIM-Select's Gram-matrix form against a literal SVD (Eq. 4), the ablation
without TRIM (pooled distillation), and the evaluation of the Table 1 / Table 4 miniature (short captions with
shared first sentences, hard pairs that differ only after token 77, ties counted half)."""

import pytest
import torch
import torch.nn.functional as F

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor
from helpers.onelip import run_objective
from hf_longclip import OneLIPForPreTraining
from hf_longclip.evaluation.long_captions import late_difference_pairs
from hf_longclip.metrics.retrieval import pair_recall_at_1, recall_at_1_by_text
from hf_longclip.models.onelip.modeling_onelip import TRIMRefine
from hf_longclip.objectives.onelip import OneLIPLoss, pooled_distillation_loss, trim_scores
from hf_longclip.recipes.onelip.task import OneLIPTask


def test_trim_importance_equals_the_svd_formula_of_eq_4():
    torch.manual_seed(0)
    states = torch.randn(3, 20, 8) + 2 * torch.randn(3, 1, 8)  # a shared direction, as CLIP's token states have
    valid = torch.arange(20) < torch.tensor([[20], [9], [3]])  # the last text has fewer tokens than r
    for rank in (1, 4, 8):
        matrix = states.double().masked_fill(~valid[..., None], 0)
        u, sigma, _ = torch.linalg.svd(matrix, full_matrices=False)
        importance = (u[..., :rank].abs() * sigma[:, None, :rank]).sum(-1)
        low = importance.masked_fill(~valid, float("inf")).amin(-1, keepdim=True)
        high = importance.masked_fill(~valid, float("-inf")).amax(-1, keepdim=True)
        expected = ((importance - low) / (high - low)).masked_fill(~valid, float("-inf")).float()
        actual = trim_scores(states, states, torch.randn(3, 8), valid, rank=rank, alpha=0.0)
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_pooled_ablation_replaces_trim_by_mean_pooled_distillation():
    torch.manual_seed(0)
    states, teacher = torch.randn(2, 6, 4), torch.randn(2, 3, 4)
    valid = torch.tensor([[True] * 6, [True] * 2 + [False] * 4])
    by_hand = torch.stack([1 - F.cosine_similarity(states[0].mean(0), teacher[0].mean(0), dim=0),
                           1 - F.cosine_similarity(states[1, :2].mean(0), teacher[1, :2].mean(0), dim=0)]).mean()
    torch.testing.assert_close(pooled_distillation_loss(states, teacher, valid, valid[:, :3]), by_hand)

    image = F.normalize(torch.randn(2, 5), dim=-1)
    inputs = dict(image_embeds=image, text_embeds=F.normalize(torch.randn(2, 5), dim=-1), logit_scale=torch.tensor(3.0),
                  text_states=states, token_embeds=torch.randn(2, 6, 5), valid=valid, teacher_states=teacher)
    refine = TRIMRefine(3, 4)
    torch.nn.init.normal_(refine.queries)
    pooled = run_objective(OneLIPLoss(top_k=2, distillation="pooled"), inputs, refine)
    trim = run_objective(OneLIPLoss(top_k=2), inputs, refine)
    torch.testing.assert_close(pooled["token_loss"], 0.1 * by_hand)
    for term in ("coarse_loss", "contrastive_loss"):
        torch.testing.assert_close(pooled[term], trim[term])
    with pytest.raises(ValueError, match="distillation"):
        OneLIPLoss(distillation="mean")
    with pytest.raises(ValueError, match="token_distillation"):
        OneLIPTask(OneLIPForPreTraining.from_clip(tiny_clip()), None, teacher=tiny_clip(), token_distillation="mean")


def test_pooled_task_freezes_the_unused_trim_queries_and_trains():
    from hf_longclip.data.collate import ImageTextCollator

    clip = tiny_clip()
    model = OneLIPForPreTraining.from_clip(clip)
    assert model.trim_refine.queries.requires_grad  # the model alone: TRIM's task trains them
    task = OneLIPTask(model, ImageTextCollator(tiny_onelip_processor()), teacher=clip, token_distillation="pooled")
    assert not model.trim_refine.queries.requires_grad and task.options()["token_distillation"] == "pooled"
    batch = task.collate_fn([{"image": image, "caption": caption}
                             for image, caption in zip(random_images(4), CAPTIONS)])
    sum(task.compute_loss(model, batch).values()).backward()
    assert model.trim_refine.queries.grad is None
    assert model.onelip.text_model.encoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_pair_recall_counts_ties_half_and_the_twins_own_scores():
    images = F.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.2], [0.0, 1.0], [0.3, 1.0]]), dim=-1)
    texts = F.normalize(torch.tensor([[1.0, 0.1], [1.0, 0.1], [0.2, 1.0], [0.0, 1.0]]), dim=-1)
    # pair (0, 1): identical texts, so each image ties (half a hit each); text 0 (= text 1) prefers image 0: one hit
    # of two. Pair (2, 3): image 2 prefers text 3, image 3 text 2, and both texts prefer the other image: no hit.
    assert pair_recall_at_1(images, texts, [(0, 1), (2, 3)]) == (25.0, 25.0)
    assert pair_recall_at_1(images, texts, [(0, 1)]) == (50.0, 50.0)
    assert pair_recall_at_1(images, texts[[1, 0, 3, 2]], [(2, 3)]) == (100.0, 100.0)


def test_recall_by_text_treats_images_sharing_a_text_as_one_class():
    images = F.normalize(torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), dim=-1)
    texts = F.normalize(torch.tensor([[1.0, 0.05], [0.1, 1.0]]), dim=-1)  # text 0 is images 0 and 1's, text 1 image 2's
    assert recall_at_1_by_text(images, texts, torch.tensor([0, 0, 1])) == (100.0, 100.0)
    assert recall_at_1_by_text(images, texts, torch.tensor([1, 0, 0])) == (pytest.approx(100 / 3), 0.0)


def test_late_difference_pairs_keep_the_pairs_equal_on_their_first_tokens():
    from hf_longclip.data.synthetic import load_synthetic_scenes
    from hf_longclip.data.tokenizer import train_scene_tokenizer
    from hf_longclip.miniature import scene_corpus

    scenes = load_synthetic_scenes(num_train=16, num_test=24, image_size=32)
    tokenizer = train_scene_tokenizer(scene_corpus(scenes), model_max_length=77)
    test = scenes["test"]
    pairs = late_difference_pairs(test, tokenizer, 77)
    assert 0 < len(pairs) <= 12
    ids = tokenizer(list(test["caption"]), verbose=False)["input_ids"]
    for a, b in pairs:
        assert test[a]["group_id"] == test[b]["group_id"]
        assert ids[a][:77] == ids[b][:77] and ids[a] != ids[b]
    early = [(a, b) for a, b in zip(range(0, 24, 2), range(1, 24, 2)) if (a, b) not in pairs]
    assert all(ids[a][:77] != ids[b][:77] for a, b in early)  # the other pairs differ within 77 tokens
