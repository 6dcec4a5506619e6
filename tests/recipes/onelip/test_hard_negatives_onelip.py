"""PO-HNM (OneLIP Sec. 3.2, Eq. 8-9): the negative bank, the 6-byte queue store, faiss mining against brute force,
same-image exclusion, Eq. 9 on hand-made difficulties (boundaries included), and the loss with queued negatives
(M = 0 is plain OneLIP exactly; otherwise a transcription of Eq. 1 with the extra denominator terms)."""

from unittest import mock

import datasets
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import CLIPModel

from helpers.builders import CAPTIONS, random_images, tiny_clip, tiny_onelip_processor, tiny_processor
from helpers.onelip import handmade_bank, run_objective, unit
from hf_longclip import OneLIPForPreTraining
from hf_longclip.data.collate import ImageTextCollator
from hf_longclip.models.onelip.modeling_onelip import TRIMRefine
from hf_longclip.objectives.onelip import OneLIPLoss
from hf_longclip.recipes.onelip.hard_negatives import (
    EMPTY,
    QUEUE_DTYPE,
    HardNegativeQueues,
    QueueStore,
    difficulty,
    keep_mask,
)
from hf_longclip.recipes.onelip.negative_bank import NegativeBank, model_digest
from hf_longclip.recipes.onelip.task import OneLIPTask


def brute_force_queue(bank: NegativeBank, sample: int, query: np.ndarray, size: int, exclude=()) -> list[int]:
    """Indices of the `size` captions of highest <query, caption>, outside the sample's own and `exclude`."""
    scores = np.asarray(bank.captions, dtype=np.float32) @ query
    allowed = [c for c in np.argsort(-scores, kind="stable")
               if bank.owners[c] != sample and c not in set(exclude)]
    return allowed[:size]


@pytest.fixture
def random_bank(tmp_path) -> NegativeBank:
    rng = np.random.default_rng(0)
    return handmade_bank(tmp_path / "bank", unit(rng.normal(size=(120, 8))).astype(np.float16),
                         unit(rng.normal(size=(40, 8))).astype(np.float16), per_sample=3)


def test_difficulty_is_eq8_on_a_hand_computed_case():
    image, text = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    negatives = torch.tensor([[[0.6, 0.8], [1.0, 0.0]]])
    # d = 0.6 cos(img, neg) + 0.4 cos(text, neg): 0.6 * 0.6 + 0.4 * 0.8 and 0.6 * 1 + 0.4 * 0
    torch.testing.assert_close(difficulty(image, text, negatives, beta=0.6), torch.tensor([[0.68, 0.6]]))


@pytest.mark.parametrize(("current", "previous", "kept"), [
    (0.5, 0.0, False),          # d = theta: easy (Eq. 9 drops d <= theta) even though it moved a lot
    (0.25, 0.75, False),        # easy
    (0.75, 0.5, True),          # hard, |delta d| = delta exactly: still evolving, kept
    (0.75, 1.0, True),          # hard, moved down by delta: kept
    (0.75, 0.625, False),       # hard but stagnant (|delta d| = 0.125 < delta)
    (0.75, 0.75, False),        # hard, unchanged: stagnant
    (0.5078125, 0.0, True),     # just above theta, moving
])
def test_keep_mask_is_eq9_at_its_boundaries(current, previous, kept):
    # theta = 0.5 and delta = 0.25 and all values exact in binary, so the boundaries are exact in float32
    result = keep_mask(torch.tensor([current]), torch.tensor([previous]), theta=0.5, delta=0.25)
    assert result.tolist() == [kept]


def test_keep_mask_with_the_paper_defaults():
    current = torch.tensor([0.39, 0.41, 0.70, 0.70, 0.70])
    previous = torch.tensor([0.10, 0.10, 0.68, 0.60, 0.80])
    assert keep_mask(current, previous, theta=0.4, delta=0.05).tolist() == [False, True, False, True, True]


def test_queue_store_holds_six_bytes_per_negative_and_touches_only_given_rows(tmp_path):
    assert QUEUE_DTYPE.itemsize == 6
    store = QueueStore(tmp_path / "queues", num_samples=10, queue_size=7)
    row_bytes = 4 + 7 * 6  # the row's int32 "refreshed at" step, then 7 negatives of 6 bytes
    assert (tmp_path / "queues" / "queues.bin").stat().st_size == 10 * row_bytes
    rows = np.array([3, 7])
    indices = np.array([[5, 9, 2_000_000_000, EMPTY, 0, 1, 2], [8, 8, 8, 8, 8, 8, 8]])
    scores = np.array([[0.4004, -1.0, 0.5, 0, 0.125, 0.25, 0.75]] * 2)
    store.write(rows, indices, scores, step=12)
    read_indices, read_scores, refreshed = store.read(rows)
    assert read_indices.tolist() == indices.tolist() and refreshed.tolist() == [12, 12]
    np.testing.assert_array_equal(read_scores, scores.astype(np.float16).astype(np.float32))  # d_prev in float16
    assert np.abs(read_scores - scores).max() < 5e-4
    raw = np.fromfile(tmp_path / "queues" / "queues.bin", dtype=np.uint8).reshape(10, row_bytes)
    assert not raw[[0, 1, 2, 4, 5, 6, 8, 9]].any(), "rows that were not written changed"
    assert np.frombuffer(raw[3, :4].tobytes(), "<i4")[0] == 12  # little-endian int32 step, int32 index, float16 d
    assert np.frombuffer(raw[3, 4:8].tobytes(), "<i4")[0] == 5
    assert np.frombuffer(raw[3, 8:10].tobytes(), "<f2")[0] == np.float16(0.4004)


def test_initial_mining_is_the_top_m_by_eq8_without_the_samples_own_captions(random_bank, tmp_path):
    queues = HardNegativeQueues(random_bank, tmp_path / "queues", queue_size=6, beta=0.6)
    queues.initialise()
    indices, scores, refreshed = queues.store.read(np.arange(40))
    assert (refreshed == 0).all()
    for sample in range(40):
        image = np.asarray(random_bank.images[sample], dtype=np.float32)
        text = np.asarray(random_bank.captions[3 * sample], dtype=np.float32)  # the caption it is trained on
        expected = brute_force_queue(random_bank, sample, 0.6 * image + 0.4 * text, 6)
        assert indices[sample].tolist() == expected, sample
        assert not set(indices[sample]) & {3 * sample, 3 * sample + 1, 3 * sample + 2}
        exact = np.asarray(random_bank.captions[expected], dtype=np.float32) @ (0.6 * image + 0.4 * text)
        np.testing.assert_allclose(scores[sample], exact, atol=1e-3)


def test_captions_of_the_same_image_are_never_queued_even_when_they_are_nearest(tmp_path):
    rng = np.random.default_rng(1)
    images = unit(rng.normal(size=(10, 4)))
    captions = np.repeat(images, 2, axis=0)  # each image's two captions are its own embedding: the nearest of all
    captions[1::2] = unit(images + 0.01)
    bank = handmade_bank(tmp_path / "bank", captions.astype(np.float16), images.astype(np.float16), per_sample=2)
    queues = HardNegativeQueues(bank, tmp_path / "queues", queue_size=19)  # one more than the 18 others
    queues.initialise()
    indices, _, _ = queues.store.read(np.arange(10))
    for sample in range(10):
        queued = [i for i in indices[sample] if i != EMPTY]
        assert sorted(queued) == sorted(set(range(20)) - {2 * sample, 2 * sample + 1}), sample
        assert (indices[sample] == EMPTY).sum() == 1


def test_the_ivf_index_of_large_banks_finds_nearly_the_exact_neighbours(tmp_path):
    rng = np.random.default_rng(2)
    captions = unit(rng.normal(size=(6000, 16))).astype(np.float16)
    bank = handmade_bank(tmp_path / "bank", captions, unit(rng.normal(size=(3000, 16))).astype(np.float16), 2)
    approximate = HardNegativeQueues(bank, tmp_path / "ivf", queue_size=20, exact_limit=1000, nprobe=4)
    assert "IVF" in type(approximate.index.index).__name__
    rows = np.arange(0, 3000, 60)
    approximate.initialise()
    found, _, _ = approximate.store.read(rows)
    recall = []
    for sample, queue in zip(rows, found):
        query = 0.6 * np.asarray(bank.images[sample], np.float32) + 0.4 * np.asarray(bank.captions[2 * sample],
                                                                                     np.float32)
        recall.append(len(set(queue) & set(brute_force_queue(bank, sample, query, 20))) / 20)
        assert not set(queue) & {2 * sample, 2 * sample + 1}
    assert np.mean(recall) > 0.85


def test_refresh_applies_eq9_and_refills_with_the_best_new_captions(tmp_path):
    # 2-d embeddings: sample 0's image and text both (1, 0), so d = cos(negative, (1, 0)) = its first coordinate
    angles = np.linspace(0, np.pi, 12)
    captions = np.stack([np.cos(angles), np.sin(angles)], axis=1)  # caption c has d = cos(angle_c), decreasing
    bank = handmade_bank(tmp_path / "bank", captions.astype(np.float16),
                         np.array([[1.0, 0.0]] * 6, dtype=np.float16), per_sample=2)
    d = np.cos(angles).astype(np.float16).astype(np.float32)
    queues = HardNegativeQueues(bank, tmp_path / "queues", queue_size=4, update_steps=5, theta=0.4, delta=0.05)
    # d: 1, .96, .84, .65, .42, .14, -.14, ... Sample 0 owns captions 0 and 1; its queue: 2 (hard, moved),
    # 3 (hard, stagnant), 8 (easy) and 4 (hard: 0.415 > theta, moved)
    queue, previous = np.array([2, 3, 8, 4]), np.array([d[2] - 0.2, d[3] - 0.01, 0.0, d[4] + 0.3])
    queues.store.write(np.array([0]), queue[None], previous[None], step=0)
    queues.store.write(np.array([1]), np.array([[4, 6, 7, 9]]), np.zeros((1, 4)), step=3)
    rows = torch.tensor([0, 1])
    embeds, mask = queues.negatives(rows)
    assert mask.all() and torch.equal(embeds[0].float(), torch.from_numpy(captions[queue]).half().float())
    anchor = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    counts = queues.refresh(rows, anchor, anchor, embeds, step=5)
    assert counts == {"queues_refreshed": 1, "negatives_replaced": 2}  # sample 1 refreshed at 3: not due
    indices, scores, refreshed = queues.store.read(np.array([0, 1]))
    # kept first (2 and 4, d_prev := d now), then the best captions not owned (0, 1) and not in the queue before
    # (2, 3, 4, 8: the dropped stagnant 3 does not come straight back): 5, 6
    assert indices[0].tolist() == [2, 4, 5, 6]
    np.testing.assert_allclose(scores[0], d[[2, 4, 5, 6]], atol=1e-3)
    assert refreshed.tolist() == [5, 3] and indices[1].tolist() == [4, 6, 7, 9]

    offline = HardNegativeQueues(bank, tmp_path / "offline", queue_size=4, update_steps=1, online=False)
    offline.store.write(np.array([0]), queue[None], previous[None], step=0)
    assert offline.refresh(rows[:1], anchor[:1], anchor[:1], embeds[:1], step=100)["queues_refreshed"] == 0
    assert offline.store.read(np.array([0]))[0][0].tolist() == queue.tolist()


def test_queue_store_checkpoint_copy_restores_it_exactly(random_bank, tmp_path):
    queues = HardNegativeQueues(random_bank, tmp_path / "live", queue_size=5)
    queues.initialise()
    queues.save(tmp_path / "checkpoint")
    saved = (tmp_path / "live" / "queues.bin").read_bytes()
    queues.store.write(np.arange(40), np.zeros((40, 5), np.int64), np.zeros((40, 5)), step=9)
    queues.load(tmp_path / "checkpoint")
    assert (tmp_path / "live" / "queues.bin").read_bytes() == saved
    assert queues.store.read(np.array([0]))[2].tolist() == [0]


def scenes_dataset(n: int = 12) -> datasets.Dataset:
    captions = [f"{CAPTIONS[i % 4]} number {i}. {CAPTIONS[(i + 1) % 4]}" for i in range(n)]
    return datasets.Dataset.from_dict({"image": random_images(n), "caption": captions,
                                       "captions": [[c, f"another caption of image {i}"] for i, c in
                                                    enumerate(captions)]})


def test_bank_holds_the_base_models_embeddings_is_reused_and_refuses_other_data_or_base(accelerator, tmp_path):
    clip, processor, data = tiny_clip(), tiny_processor(77), scenes_dataset()
    bank = NegativeBank.build_or_load(tmp_path / "bank", data, clip, processor, accelerator, batch_size=5)
    assert (bank.num_samples, len(bank.captions), bank.dim) == (12, 24, clip.config.projection_dim)
    assert np.asarray(bank.offsets).tolist() == list(range(0, 25, 2))
    assert np.asarray(bank.owners).tolist() == [s for s in range(12) for _ in range(2)]
    texts = [text for row in data for text in row["captions"]]
    inputs = processor(text=texts, images=list(data["image"]), padding="longest", return_tensors="pt")
    with torch.no_grad():
        text = F.normalize(clip.get_text_features(input_ids=inputs["input_ids"],
                                                  attention_mask=inputs["attention_mask"]).pooler_output, dim=-1)
        image = F.normalize(clip.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output, dim=-1)
    torch.testing.assert_close(torch.from_numpy(np.array(bank.captions)).float(), text, atol=1e-3, rtol=0)
    torch.testing.assert_close(torch.from_numpy(np.array(bank.images)).float(), image, atol=1e-3, rtol=0)

    with mock.patch.object(CLIPModel, "get_text_features", side_effect=AssertionError("re-encoded")):
        again = NegativeBank.build_or_load(tmp_path / "bank", data, clip, processor, accelerator)
    assert again.metadata == bank.metadata
    with pytest.raises(ValueError, match="dataset fingerprint"):
        NegativeBank.build_or_load(tmp_path / "bank", data.select(range(11)), clip, processor, accelerator)
    other_base = tiny_clip(seed=1)
    assert model_digest(other_base) != model_digest(clip)
    with pytest.raises(ValueError, match="base model digest"):
        NegativeBank.build_or_load(tmp_path / "bank", data, other_base, processor, accelerator)


def loss_inputs(batch: int = 4, tokens: int = 12, width: int = 8, dim: int = 6):
    generator = torch.Generator().manual_seed(0)
    return dict(
        image_embeds=F.normalize(torch.randn(batch, dim, generator=generator), dim=-1),
        text_embeds=F.normalize(torch.randn(batch, dim, generator=generator), dim=-1),
        logit_scale=torch.tensor(10.0),
        text_states=torch.randn(batch, tokens, width, generator=generator),
        token_embeds=torch.randn(batch, tokens, dim, generator=generator),
        valid=torch.ones(batch, tokens, dtype=torch.bool),
        teacher_states=torch.randn(batch, 8, width, generator=generator),
    )


REFINE = TRIMRefine(8, 8).apply(lambda m: torch.nn.init.normal_(m.queries))


def test_no_queued_negatives_is_plain_onelip_exactly():
    loss, inputs = OneLIPLoss(top_k=6), loss_inputs()
    plain = run_objective(loss, inputs, REFINE)
    empty = run_objective(loss, inputs, REFINE, hard_negative_embeds=torch.zeros(4, 0, 6),
                          hard_negative_mask=torch.zeros(4, 0, dtype=bool))
    for term in plain:
        assert torch.equal(plain[term], empty[term]), term


def test_queued_negatives_join_the_image_to_text_denominator():
    loss, inputs = OneLIPLoss(top_k=6), loss_inputs()
    negatives = F.normalize(torch.randn(4, 3, 6, generator=torch.Generator().manual_seed(1)), dim=-1)
    mask = torch.tensor([[True, True, True], [True, False, True], [False, False, False], [True, True, False]])
    terms = run_objective(loss, inputs, REFINE, hard_negative_embeds=negatives, hard_negative_mask=mask)
    image, text, scale = inputs["image_embeds"], inputs["text_embeds"], 10.0
    i2t, t2i = 0.0, 0.0
    for i in range(4):  # Eq. 1 written out: each image against every text of the batch and its own queued negatives
        logits = [scale * image[i] @ text[j] for j in range(4)]
        logits += [scale * image[i] @ negatives[i, m] for m in range(3) if mask[i, m]]
        i2t -= torch.log_softmax(torch.stack(logits), 0)[i] / 4
        t2i -= torch.log_softmax(torch.stack([scale * text[i] @ image[j] for j in range(4)]), 0)[i] / 4
    torch.testing.assert_close(terms["contrastive_loss"], 0.7 * (i2t + t2i))
    plain = run_objective(loss, inputs, REFINE)
    assert terms["contrastive_loss"] > plain["contrastive_loss"]
    assert torch.equal(terms["coarse_loss"], plain["coarse_loss"])


def test_the_task_needs_sample_indices_when_it_queues_negatives(random_bank, tmp_path):
    clip = tiny_clip()
    processor = tiny_onelip_processor()
    queues = HardNegativeQueues(random_bank, tmp_path / "queues", queue_size=2)
    task = OneLIPTask(OneLIPForPreTraining.from_clip(clip), ImageTextCollator(processor), teacher=clip,
                      hard_negatives=queues, trim_top_k=20)
    assert task.options()["hard_negatives"] == queues.options() and task.options()["trim_top_k"] == 20
    batch = task.collate_fn([{"image": image, "caption": caption} for image, caption in
                             zip(random_images(2), CAPTIONS[:2])])
    with pytest.raises(ValueError, match="sample_index"):
        task.compute_loss(task.model.train(), batch)
    with pytest.raises(ValueError, match="queue_size >= 1"):
        HardNegativeQueues(random_bank, tmp_path / "none", queue_size=0)
