"""CAST's pieces against hand-computed cases and independent references written here: farthest point sampling,
the soft assignment and its padding, segment mean pooling, the composed hierarchy, the image processor on a
hand-drawn image, and the clear errors of bad input."""

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from hf_longclip import CASTImageProcessor, CASTVisionConfig, CASTVisionModel
from hf_longclip.models.cast.image_processing_cast import compute_superpixels, relabel_contiguous
from hf_longclip.models.cast.segments import (
    cosine_soft_assignment,
    farthest_point_sampling,
    hierarchy_label_maps,
    segment_pooling_weights,
    sincos_2d_positions,
)


def tiny_cast(num_segments=16, depths=(1, 1, 1), num_clusters=(6, 3), seed=0) -> CASTVisionModel:
    torch.manual_seed(seed)
    config = CASTVisionConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=32,
                              num_segments=num_segments, depths=list(depths), num_clusters=list(num_clusters))
    return CASTVisionModel(config).eval()


def block_labels(batch=2, size=32, ids=16, seed=0) -> torch.Tensor:
    """(batch, size, size) labels made of 8x8 blocks with random ids below `ids`."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, ids, (batch, size // 8, size // 8), generator=generator)
    return blocks.repeat_interleave(8, 1).repeat_interleave(8, 2)


# ---------------------------------------------------------------------------------------------------------------
# Farthest point sampling
# ---------------------------------------------------------------------------------------------------------------
def test_fps_on_a_hand_made_point_set():
    # Mean (1, 0.4). Farthest from it: (4, 0) (d^2 = 9.16); then from {(4,0)}: (-2, 0) (36 vs (0, 2): 20);
    # then min distances: (0,0): 4, (0,2): 8, (1,0): 4 -> (0, 2); then (0,0) and (1,0) both at min distance 1 ->
    # lowest index, (0, 0).
    points = torch.tensor([[[0.0, 0.0], [4.0, 0.0], [0.0, 2.0], [-2.0, 0.0], [1.0, 0.0]]])
    assert farthest_point_sampling(points, 4).tolist() == [[1, 3, 2, 0]]


def test_fps_never_picks_padding_and_repeats_valid_points_when_short():
    points = torch.tensor([[[0.0, 0.0], [100.0, 100.0], [1.0, 0.0], [-50.0, 3.0]]])
    valid = torch.tensor([[True, False, True, False]])  # the far-away points are padding
    chosen = farthest_point_sampling(points, 3, valid)[0].tolist()
    assert set(chosen[:2]) == {0, 2} and chosen[2] in (0, 2)


def test_fps_matches_a_loop_reference_on_random_points():
    generator = torch.Generator().manual_seed(1)
    points = torch.randn(3, 30, 5, generator=generator)
    got = farthest_point_sampling(points, 10)
    for b in range(3):
        cloud = points[b].double()
        dist = ((cloud - cloud.mean(0)) ** 2).sum(-1)
        expected = []
        for _ in range(10):
            i = int(dist.argmax())
            expected.append(i)
            dist = torch.minimum(dist, ((cloud - cloud[i]) ** 2).sum(-1))
        assert got[b].tolist() == expected


# ---------------------------------------------------------------------------------------------------------------
# Soft assignment
# ---------------------------------------------------------------------------------------------------------------
def test_assignment_rows_sum_to_one_and_ignore_padding():
    generator = torch.Generator().manual_seed(0)
    nodes, centroids = torch.randn(2, 7, 4, generator=generator), torch.randn(2, 3, 4, generator=generator)
    node_valid = torch.tensor([[True] * 5 + [False] * 2, [True] * 7])
    centroid_valid = torch.tensor([[True, True, False], [True, True, True]])
    assignment = cosine_soft_assignment(nodes, centroids, 5.0, node_valid, centroid_valid)
    torch.testing.assert_close(assignment[0, :5].sum(-1), torch.ones(5))
    torch.testing.assert_close(assignment[1].sum(-1), torch.ones(7))
    assert (assignment[0, 5:] == 0).all() and (assignment[0, :, 2] == 0).all()
    # The formula itself, for one entry: softmax over the valid centroids of 5 * cosine.
    cos = torch.nn.functional.cosine_similarity(nodes[0, 1][None], centroids[0, :2], dim=-1)
    torch.testing.assert_close(assignment[0, 1, :2], torch.softmax(5.0 * cos, dim=0))


# ---------------------------------------------------------------------------------------------------------------
# Segment mean pooling and positions
# ---------------------------------------------------------------------------------------------------------------
def test_segment_mean_pooling_matches_a_loop():
    generator = torch.Generator().manual_seed(2)
    height, width, stride, num_segments = 13, 18, 4, 9  # sizes not multiples of the stride
    grid = (-(-height // stride), -(-width // stride))
    labels = torch.randint(0, num_segments - 1, (2, height, width), generator=generator)  # id 8 never occurs
    features = torch.randn(2, grid[0] * grid[1], 6, generator=generator)
    weights, valid = segment_pooling_weights(labels, num_segments, grid, stride)
    pooled = weights @ features
    for b in range(2):
        for s in range(num_segments):
            pixels = [features[b, (y // stride) * grid[1] + x // stride]
                      for y in range(height) for x in range(width) if labels[b, y, x] == s]
            assert bool(valid[b, s]) == bool(pixels)
            expected = torch.stack(pixels).mean(0) if pixels else torch.zeros(6)
            torch.testing.assert_close(pooled[b, s], expected)


def test_sincos_positions_by_hand():
    positions = sincos_2d_positions(2, 3, 8).view(2, 3, 8)
    # Row half (dims 0-3) encodes the row index, column half the column: sin/cos of k / 10000^(2i/4).
    row, col = 1, 2
    expected = [np.sin(row), np.cos(row), np.sin(row / 100), np.cos(row / 100),
                np.sin(col), np.cos(col), np.sin(col / 100), np.cos(col / 100)]
    torch.testing.assert_close(positions[row, col], torch.tensor(expected, dtype=torch.float32))


# ---------------------------------------------------------------------------------------------------------------
# The model: padding, invariances, hierarchy
# ---------------------------------------------------------------------------------------------------------------
def test_model_ignores_padding_ids_and_segment_order():
    model = tiny_cast(num_segments=16)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    labels = block_labels(ids=8)  # at most 8 of the 16 ids are used: the rest is padding
    spread = labels * 2 + 1  # the same segments under other ids (all odd): different padding positions
    permuted = torch.randperm(16, generator=torch.Generator().manual_seed(3))[labels]
    more_padding = tiny_cast(num_segments=40)  # the same weights with 24 more padding tokens
    more_padding.load_state_dict(model.state_dict())
    with torch.no_grad():
        outputs = [model(pixels, superpixels) for superpixels in (labels, spread, permuted)]
        outputs.append(more_padding(pixels, labels))
    for other in outputs[1:]:
        torch.testing.assert_close(other.pooler_output, outputs[0].pooler_output, atol=1e-5, rtol=1e-4)
    out = outputs[0]
    mask = out.segment_masks[0].bool()
    assert mask.tolist() == [[(labels[b] == s).any().item() for s in range(16)] for b in range(2)]
    first = out.assignments[0]
    assert (first[~mask] == 0).all()  # padding hands out no mass
    torch.testing.assert_close(first[mask].sum(-1), torch.ones(int(mask.sum())))
    for assignment, coarse in zip(out.assignments, out.segment_masks[1:]):
        assert (assignment.sum(1)[~coarse.bool()] == 0).all()  # padding coarse segments receive none


def test_images_with_fewer_segments_than_clusters_work():
    model = tiny_cast(num_segments=16, num_clusters=(6, 3))
    labels = torch.zeros(1, 32, 32, dtype=torch.long)
    labels[:, :, 16:] = 1  # two segments only, fewer than the 6 and 3 coarse segments
    with torch.no_grad():
        out = model(torch.randn(1, 3, 32, 32), labels)
    assert torch.isfinite(out.pooler_output).all()
    assert [m.sum().item() for m in out.segment_masks] == [2, 2, 2]


def test_composed_hard_assignments_partition_the_pixels():
    model = tiny_cast(num_segments=16)
    labels = block_labels(ids=16, seed=4)
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32), labels)
    maps = hierarchy_label_maps(labels, out.assignments)
    assert len(maps) == 3 and maps[0].equal(labels)
    for level, (label_map, mask) in enumerate(zip(maps, out.segment_masks)):
        assert label_map.shape == labels.shape
        # every pixel in exactly one segment, and that segment a real (non-padding) one
        assert mask.bool().gather(1, label_map.flatten(1)).all(), level
    for fine, coarse in zip(maps, maps[1:]):
        # nested: all pixels of a fine segment lie in one coarse segment
        for b in range(2):
            for s in fine[b].unique():
                assert coarse[b][fine[b] == s].unique().numel() == 1
    # soft composition agrees: rows of the product of the assignments still sum to one for valid superpixels
    composed = out.assignments[0] @ out.assignments[1]
    valid = out.segment_masks[0].bool()
    torch.testing.assert_close(composed[valid].sum(-1), torch.ones(int(valid.sum())))


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_bf16_autocast_forward_and_backward(dtype):
    model = tiny_cast().train()
    with torch.autocast("cpu", dtype=dtype):
        out = model(torch.randn(2, 3, 32, 32), block_labels())
    out.pooler_output.float().sum().backward()
    assert torch.isfinite(model.embeddings.cls_token.grad).all()
    assert out.pooler_output.dtype == dtype


def test_sdpa_matches_eager_with_padding():
    model = tiny_cast()
    inputs = (torch.randn(2, 3, 32, 32), block_labels(ids=10))
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        sdpa = model(*inputs).pooler_output
        model.set_attn_implementation("eager")
        eager = model(*inputs).pooler_output
    torch.testing.assert_close(sdpa, eager, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------
def test_bad_model_inputs_are_clear_errors():
    model = tiny_cast()
    with pytest.raises(ValueError, match="smaller than the stem stride"):
        model(torch.randn(1, 3, 6, 32), torch.zeros(1, 6, 32, dtype=torch.long))
    with pytest.raises(ValueError, match="like pixel_values"):
        model(torch.randn(1, 3, 32, 32), torch.zeros(1, 32, 16, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, num_segments = 16\)"):
        model(torch.randn(1, 3, 32, 32), torch.full((1, 32, 32), 16))
    with pytest.raises(ValueError, match="superpixels"):
        model(torch.randn(1, 3, 32, 32))


def test_bad_configs_and_processor_settings_are_clear_errors():
    with pytest.raises(ValueError, match="exceeds the 64 pixels"):
        CASTVisionConfig(image_size=8, num_segments=65, num_clusters=[16, 8, 4])
    with pytest.raises(ValueError, match="smaller than the stem stride"):
        CASTVisionConfig(image_size=7, num_segments=40, num_clusters=[16, 8, 4])
    with pytest.raises(ValueError, match="decrease"):
        CASTVisionConfig(num_clusters=[64, 80, 16])
    with pytest.raises(ValueError, match="stem stride"):
        CASTImageProcessor(size=4)
    with pytest.raises(ValueError, match=r"num_segments must be in \[1, 64\]"):
        CASTImageProcessor(size=8, num_segments=65)
    with pytest.raises(ValueError, match="SFCN"):
        CASTImageProcessor(superpixel_method="sfcn")
    with pytest.raises(ValueError, match="pixels"):
        compute_superpixels(np.zeros((4, 4, 3), np.uint8), 17)


# ---------------------------------------------------------------------------------------------------------------
# The image processor
# ---------------------------------------------------------------------------------------------------------------
def hand_drawn() -> tuple[Image.Image, torch.Tensor]:
    """64x64 image of four flat regions (three rectangles off the 16 px superpixel grid on grey) and the region id
    of every pixel, read from its colour."""
    image = Image.new("RGB", (64, 64), (128, 128, 128))
    draw = ImageDraw.Draw(image)
    for box, colour in zip([(0, 0, 27, 35), (28, 0, 63, 35), (0, 36, 40, 63)],
                           [(230, 20, 20), (20, 20, 230), (20, 200, 20)]):
        draw.rectangle(box, fill=colour)
    _, region = np.unique(np.asarray(image).reshape(-1, 3), axis=0, return_inverse=True)
    return image, torch.from_numpy(region.reshape(64, 64))


@pytest.mark.parametrize("method", ["seeds", "slic"])
def test_processor_on_a_hand_drawn_image(method):
    image, region = hand_drawn()
    processor = CASTImageProcessor(size=64, num_segments=16, superpixel_method=method)
    out = processor([image, image.convert("L"), image.convert("RGBA")])
    assert out["pixel_values"].shape == (3, 3, 64, 64) and out["superpixels"].shape == (3, 64, 64)
    assert out["superpixels"].dtype == torch.long
    labels = out["superpixels"][0]
    ids = labels.unique()
    assert ids.tolist() == list(range(len(ids))) and len(ids) <= 16  # contiguous, at most the count asked
    assert len(ids) >= 4  # at least one per region
    # No superpixel straddles two drawn regions, away from 2 px of each edge.
    boundary = torch.zeros(64, 64)
    boundary[1:] += (region[1:] != region[:-1]).float()
    boundary[:, 1:] += (region[:, 1:] != region[:, :-1]).float()
    near_edge = torch.nn.functional.max_pool2d(boundary[None, None], 5, stride=1, padding=2)[0, 0] > 0
    for segment in ids:
        inside = (labels == segment) & ~near_edge
        assert region[inside].unique().numel() <= 1, f"{method}: segment {segment} crosses a drawn edge"
    # The pixel values are the normalised image: the red box's top-left pixel.
    mean, std = np.array(processor.image_mean), np.array(processor.image_std)
    expected = (np.array([230, 20, 20]) / 255 - mean) / std
    np.testing.assert_allclose(out["pixel_values"][0, :, 5, 5].numpy(), expected, rtol=1e-5)
    # Grayscale and RGBA inputs are converted, not refused
    assert out["superpixels"][1].max() < 16 and out["superpixels"][2].equal(out["superpixels"][0])


def test_segment_count_defaults_scale_with_the_size_and_fewer_segments_are_padding():
    assert CASTImageProcessor().num_segments == 196
    assert CASTImageProcessor(size=112).num_segments == 49
    flat = Image.new("RGB", (96, 96), (90, 90, 90))
    labels = CASTImageProcessor(size=96, num_segments=36, superpixel_method="slic")(flat)["superpixels"][0]
    assert 1 <= labels.max() + 1 <= 36


def test_relabel_contiguous():
    labels = np.array([[7, 7, 3], [9, 3, 3]])
    assert relabel_contiguous(labels).tolist() == [[1, 1, 0], [2, 0, 0]]


def test_an_algorithm_returning_too_many_segments_is_asked_again(monkeypatch):
    from hf_longclip.models.cast import image_processing_cast

    calls = []

    def greedy(image, count):  # returns twice the segments asked
        calls.append(count)
        return np.arange(image.shape[0] * image.shape[1]).reshape(image.shape[:2]) % (2 * count)

    monkeypatch.setitem(image_processing_cast.SUPERPIXEL_METHODS, "greedy", greedy)
    labels = compute_superpixels(np.zeros((16, 16, 3), np.uint8), 10, "greedy")
    assert labels.max() + 1 <= 10 and calls[0] == 10 and len(calls) > 1


def test_hierarchy_png_is_written(tmp_path):
    from hf_longclip.recipes.cast.plots import plot_segment_hierarchy

    image, _ = hand_drawn()
    labels = torch.from_numpy(compute_superpixels(np.asarray(image), 16))
    even_odd = torch.nn.functional.one_hot(torch.arange(int(labels.max()) + 1) % 2, 2).float()  # ids by parity
    path = plot_segment_hierarchy(image, labels, [even_odd], tmp_path / "hierarchy.png")
    assert Image.open(path).size[0] > Image.open(path).size[1] > 0
    with pytest.raises(ValueError, match="do not match"):
        plot_segment_hierarchy(image, labels[:10], [even_odd], tmp_path / "bad.png")


def test_superpixels_computed_in_data_loader_workers_match_the_main_process():
    from torch.utils.data import DataLoader

    from hf_longclip.recipes.cast.task import ImageClassificationCollator

    image, _ = hand_drawn()
    rows = [{"image": image.rotate(90 * i), "label": i % 3} for i in range(8)]
    collate = ImageClassificationCollator(CASTImageProcessor(size=64, num_segments=16), lambda row: row["label"],
                                          ("pixel_values", "superpixels"))
    in_workers = list(DataLoader(rows, batch_size=4, num_workers=2, collate_fn=collate))
    for batch, start in zip(in_workers, (0, 4)):
        expected = collate(rows[start:start + 4])
        assert batch.keys() == expected.keys()
        for key in expected:
            assert batch[key].equal(expected[key]), key


def test_precomputed_superpixels_are_taken_as_computed_and_checked(monkeypatch):
    import datasets
    from transformers import CLIPImageProcessor

    from helpers.fcast import CAPTIONS, tiny_processor
    from hf_longclip import FCASTProcessor
    from hf_longclip.data.collate import ImageTextCollator
    from hf_longclip.data.superpixels import with_superpixels
    from hf_longclip.models.cast import image_processing_cast
    from hf_longclip.recipes.fcast.task import FCASTCollator

    image, _ = hand_drawn()
    rows = [{"image": image.rotate(90 * i), "caption": caption, "captions": []} for i, caption in enumerate(CAPTIONS)]
    image_processor = CASTImageProcessor(size=64, num_segments=16)
    computed = image_processor([row["image"] for row in rows])
    table = with_superpixels(datasets.Dataset.from_list(rows), image_processor)
    given = [table[i] for i in range(len(rows))]
    assert all(isinstance(row["superpixels"], np.ndarray) for row in given)
    processor = FCASTProcessor(image_processor, tiny_processor().tokenizer, max_length=16, num_chunks=2)
    expected = {"image_text": ImageTextCollator(processor)(rows), "fcast": FCASTCollator(processor, 2)(rows)}

    def never(*args, **kwargs):
        raise AssertionError("superpixels computed again")

    monkeypatch.setattr(image_processing_cast, "compute_superpixels", never)  # the given ids must be used
    out = image_processor([row["image"] for row in given], superpixels=[row["superpixels"] for row in given])
    assert out["superpixels"].equal(computed["superpixels"]) and out["pixel_values"].equal(computed["pixel_values"])
    for name, batch in {"image_text": ImageTextCollator(processor)(given),
                        "fcast": FCASTCollator(processor, 2)(given)}.items():
        assert batch.keys() == expected[name].keys()
        assert all(batch[key].equal(expected[name][key]) for key in batch), name
    ids = computed["superpixels"].numpy()
    with pytest.raises(ValueError, match="for 3 images and 4 images"):
        image_processor([row["image"] for row in rows], superpixels=ids[:3])
    with pytest.raises(ValueError, match=r"of shape \(64, 64\)"):
        image_processor([image], superpixels=[ids[0, :32]])
    with pytest.raises(ValueError, match=r"outside \[0, 16\)"):
        image_processor([image], superpixels=[ids[0] + 16])
    with pytest.raises(ValueError, match="pass the images too"):
        processor(text=CAPTIONS[:1], superpixels=[ids[0]])
    flair = FCASTProcessor(CLIPImageProcessor(), processor.tokenizer, num_chunks=1, needs_superpixels=False)
    with pytest.raises(ValueError, match="uses none"):
        flair(images=[image], superpixels=[ids[0]])
