"""CAST checkpoints converted into CASTForImageClassification / CASTVisionModel, checked against a transcription of
the released forward: github.com/twke18/CAST at commit ec85adff6fae5802684e21423112cab55fc732ae, files
cast_models/cast.py (`CAST.forward_features`, `build_2d_sincos_position_embedding`), cast_models/cast_deit.py (its
learned `pos_embed` with a [CLS] row, no `pe_token`), cast_models/modules.py (`ConvStem`, `Pooling`),
cast_models/graph_pool.py (`GraphPooling`, its `Block`, `Attention`; dgl's `farthest_point_sampler` written out in
float64 as dgl runs it) and cast_models/utils.py (`segment_mean_nd`: per-batch padding to the batch's largest id,
empty ids as zero tokens that the blocks do not mask). timm's `Block` (pre-norm, fused qkv) is written out too (timm
does not import beside this torch). The release's superpixels are transcribed from moco-v3/suppix_utils/
datasets_seeds.py and deit/datasets_seeds.py, with the evaluation transforms of moco-v3/main_lincls_suppix.py and
deit/datasets.py (torchvision's Resize + CenterCrop rounding written out: torchvision is not installed here).

Random tiny weights are saved as each training script saves them (MoCo v3 pre-training, its linear probe with
`best_acc1` beside `state_dict`, a plain state dict with a head, DeiT's `best_checkpoint.pth` with its EMA copy and
argparse namespace) and read back by `load_original_checkpoint` as `hf-longclip convert` reads them; they are fed
SEEDS superpixels of photographs (scikit-image's sample images) whose maps hold ids that own no stem cell.
"""

import argparse
import json

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from helpers.fresh_process import fresh_process
from hf_longclip import CASTForImageClassification, CASTVisionConfig, CASTVisionModel
from hf_longclip.cli import main
from hf_longclip.models.cast.convert_cast import CAST_CLUSTERS, RELEASED_PREPROCESSING, convert
from hf_longclip.models.conversion import WRAPPER_PREFIXES, load_original_checkpoint

WIDTH, HEADS, DEPTHS, CLUSTERS, SEGMENTS, IMAGE, CLASSES = 96, 12, (1, 1, 1, 1), (8, 4, 2, 1), 16, 64, 5


def segment_mean_nd(x, index):
    """utils.segment_mean_nd for (N, H, W, C) features and (N, H, W) labels: per image, the mean of each label's
    cells, max label + 1 rows (empty labels give zeros)."""
    batch, channels = x.shape[0], x.shape[-1]
    count = index.max() + 1
    flat = (torch.arange(batch)[:, None] * count + index.flatten(1)).flatten()
    sums = torch.zeros(batch * count, channels).index_add_(0, flat, x.reshape(-1, channels))
    sizes = torch.zeros(batch * count).index_add_(0, flat, torch.ones(flat.shape))
    return (sums / torch.where(sizes == 0, torch.ones_like(sizes), sizes)[:, None]).view(batch, count, channels)


class TimmBlock(nn.Module):
    def __init__(self, dim, eps=1e-6, mlp=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        if mlp:
            self.norm2 = nn.LayerNorm(dim, eps=eps)
            self.mlp = nn.Module()
            self.mlp.fc1, self.mlp.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x):
        batch, length, dim = x.shape
        q, k, v = self.attn.qkv(x).reshape(batch, length, 3, HEADS, dim // HEADS).permute(2, 0, 3, 1, 4)
        attn = ((q @ k.transpose(-2, -1)) * (dim // HEADS) ** -0.5).softmax(dim=-1)
        return self.attn.proj((attn @ v).transpose(1, 2).reshape(batch, length, dim))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp.fc2(F.gelu(self.mlp.fc1(self.norm2(x))))


class CentroidBlock(TimmBlock):
    """graph_pool.Block: attention with residual, then the tokens' mean subtracted and a bias added."""

    def __init__(self, dim):
        super().__init__(dim, mlp=False)
        self.norm = self.norm1
        del self.norm1
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        x = x + self.attention(self.norm(x))
        return x - x.mean(dim=1, keepdim=True) + self.bias


def farthest_points(points, count):
    """dgl.geometry.farthest_point_sampler(points, count, start_idx=0)."""
    distance = torch.full(points.shape[:2], float("inf"), dtype=points.dtype)
    chosen = [torch.zeros(points.shape[0], dtype=torch.long)]
    for _ in range(count - 1):
        last = points[torch.arange(points.shape[0]), chosen[-1]]
        distance = torch.minimum(distance, (points - last[:, None]).square().sum(-1))
        chosen.append(distance.argmax(dim=1))
    return torch.stack(chosen, dim=1)


class GraphPooling(nn.Module):
    def __init__(self, clusters):
        super().__init__()
        self.clusters = clusters
        self.centroid_fc = CentroidBlock(WIDTH)
        self.fc1 = nn.Sequential(nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Dropout(0.1))
        self.fc2 = nn.Sequential(nn.LayerNorm(4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, cls_token, src, mask):
        valid = (~mask).float()[..., None]
        mean = ((src * valid).sum(1) / valid.sum(1).clamp(min=1))[:, None]
        filled = torch.where(mask[..., None], mean.expand_as(src), src)
        sampled = farthest_points(torch.cat([mean, filled], dim=1).double(), self.clusters + 1)[:, 1:] - 1
        index = sampled[..., None].expand(-1, -1, WIDTH)
        nodes = self.centroid_fc(src)
        logits = 5 * F.normalize(nodes, dim=-1) @ F.normalize(nodes.gather(1, index), dim=-1).transpose(1, 2)
        assignments = logits.softmax(dim=-1)
        hidden = self.fc1(torch.cat([cls_token, src], dim=1))
        centroids = assignments.transpose(1, 2) @ hidden[:, 1:] / assignments.sum(1)[..., None]
        out = self.fc2(torch.cat([hidden[:, :1], centroids], dim=1))
        return out[:, :1] + cls_token, out[:, 1:] + src.gather(1, index), logits


class Pooling(nn.Module):
    def __init__(self, clusters):
        super().__init__()
        self.pool_block = GraphPooling(clusters)


class CASTReference(nn.Module):
    """cast.py's CAST (`learned=False`) or cast_deit.py's (`learned=True`)."""

    def __init__(self, image=IMAGE, clusters=CLUSTERS, learned=False):
        super().__init__()
        self.learned = learned
        stem, channels, width = [], 3, WIDTH // 8
        for index in range(4):
            stem += [nn.Conv2d(channels, width, 3, 2 if index < 3 else 1, 1, bias=False), nn.BatchNorm2d(width),
                     nn.ReLU(inplace=True)]
            channels, width = width, width * 2
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Sequential(*stem, nn.Conv2d(channels, WIDTH, 1))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.blocks = nn.Sequential(*[TimmBlock(WIDTH) for _ in range(sum(DEPTHS))])
        starts = [sum(DEPTHS[:stage]) for stage in range(len(DEPTHS) + 1)]
        for stage in range(len(DEPTHS)):  # the released model's aliases of the same blocks
            setattr(self, f"blocks{stage + 1}", self.blocks[starts[stage]:starts[stage + 1]])
            setattr(self, f"pool{stage + 1}", Pooling(clusters[stage]))
        self.norm = nn.LayerNorm(WIDTH, eps=1e-6)
        self.head = nn.Linear(WIDTH, CLASSES)
        grid = image // 8
        if learned:  # cast_deit.py: timm's table with a [CLS] row, trunc_normal_(std=.02)
            self.pos_embed = nn.Parameter(0.02 * torch.randn(1, grid * grid + 1, WIDTH))
            return
        # build_2d_sincos_position_embedding, meshgrid of (w, h) in 'ij' order
        grid_w, grid_h = torch.meshgrid(torch.arange(grid).float(), torch.arange(grid).float(), indexing="ij")
        omega = 1.0 / 10000.0 ** (torch.arange(WIDTH // 4).float() / (WIDTH // 4))
        out_w, out_h = grid_w.flatten()[:, None] * omega, grid_h.flatten()[:, None] * omega
        self.pos_embed = nn.Parameter(torch.cat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], 1)[None],
                                      requires_grad=False)
        self.pe_token = nn.Parameter(torch.zeros(1, 1, WIDTH), requires_grad=False)

    def forward(self, images, labels):
        x = self.patch_embed.proj(images).permute(0, 2, 3, 1)
        batch, height, width, channels = x.shape
        labels = F.interpolate(labels[:, None].float(), (height, width), mode="nearest")[:, 0].long()
        x = segment_mean_nd(x, labels)
        mask = segment_mean_nd(torch.ones(batch, height, width, 1), labels)[..., 0] <= 0.5
        positions = self.pos_embed[:, 1:] if self.learned else self.pos_embed
        x = x + segment_mean_nd(positions.view(1, height, width, channels).expand(batch, -1, -1, -1), labels)
        cls_token = self.cls_token.expand(batch, -1, -1) + (self.pos_embed[:, :1] if self.learned else self.pe_token)
        logits, tokens = [], []
        for stage in range(1, len(DEPTHS) + 1):
            cls_x = getattr(self, f"blocks{stage}")(torch.cat([cls_token, x], dim=1))
            tokens.append(cls_x[:, 1:])
            cls_token, x, logit = getattr(self, f"pool{stage}").pool_block(cls_x[:, :1], cls_x[:, 1:], mask)
            mask = torch.zeros(logit.shape[0], logit.shape[-1], dtype=torch.bool)
            logits.append(logit)
        out = self.norm(cls_x)[:, 0]
        return out, self.head(out), logits, tokens


def randomize(module, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if name.endswith(("pos_embed", "pe_token", "num_batches_tracked")):
                continue
            if name.endswith("running_var"):
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=generator))
            elif name.endswith(".weight") and tensor.dim() == 1:
                tensor.copy_(1 + 0.1 * torch.randn(tensor.shape, generator=generator))
            else:
                tensor.copy_(0.1 * torch.randn(tensor.shape, generator=generator))


def superpixels(batch, seed, noisy):
    """Labels constant over the 8 px cells, every id in [0, SEGMENTS) owning cells; `noisy` relabels pixels that
    are not a cell's top-left corner (the one CAST's nearest downsampling reads)."""
    generator = torch.Generator().manual_seed(seed)
    grid = IMAGE // 8
    cells = torch.stack([torch.randperm(grid * grid, generator=generator) % SEGMENTS for _ in range(batch)])
    labels = cells.view(batch, grid, grid).repeat_interleave(8, 1).repeat_interleave(8, 2)
    if noisy:
        noise = torch.randint(0, SEGMENTS, labels.shape, generator=generator)
        corner = (torch.arange(IMAGE) % 8 == 0)[:, None] & (torch.arange(IMAGE) % 8 == 0)[None]
        labels = torch.where(corner, labels, noise)
    return labels


@pytest.fixture(scope="module")
def cast(tmp_path_factory):
    torch.manual_seed(0)
    reference = CASTReference().eval()
    randomize(reference, seed=1)
    path = tmp_path_factory.mktemp("cast") / "best_checkpoint.pth"
    torch.save({"model": reference.state_dict(), "epoch": 99}, path)
    state = load_original_checkpoint(path)
    model, processor = convert(state, num_clusters=CLUSTERS[:-1], num_segments=SEGMENTS)
    return reference, model, processor


@pytest.mark.parametrize("noisy", [False, True])
def test_cast_features_and_logits_match_the_released_forward(cast, noisy):
    reference, model, _ = cast
    assert isinstance(model, CASTForImageClassification)
    images = torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(2))
    labels = superpixels(2, seed=3, noisy=noisy)
    with torch.no_grad():
        out, logits, pool_logits, _ = reference(images, labels)
        ours = model.cast(images, labels)
        ours_logits = model(images, labels).logits
    figures = {"features": (ours.pooler_output - out).abs().max().item(),
               "logits": (ours_logits - logits).abs().max().item(),
               "stage-1 assignment": (ours.assignments[0] - pool_logits[0].softmax(-1)).abs().max().item()}
    print(f"CAST (pixels off the cell corners relabelled: {noisy}):", {k: f"{v:.2e}" for k, v in figures.items()})
    assert max(figures.values()) < 1e-4 and out.abs().max() > 1e-2


def test_cast_defaults_differ_from_the_released_details(cast):
    """F-CAST's defaults (interleaved positions, pixel-weighted segments, LayerNorm eps 1e-6) give other features:
    the options the converter sets are what makes the parity."""
    reference, model, _ = cast
    config = model.config.to_dict()
    config.update(position_layout="interleaved", segment_pooling="pixels", pooling_layer_norm_eps=1e-6)
    default = CASTForImageClassification(type(model.config)(**{k: v for k, v in config.items()
                                                               if k not in ("model_type", "transformers_version")}))
    default.load_state_dict(model.state_dict())
    images, labels = torch.randn(1, 3, IMAGE, IMAGE), superpixels(1, seed=4, noisy=True)
    with torch.no_grad():
        assert (default.eval()(images, labels).logits - reference(images, labels)[1]).abs().max() > 1e-3


def save_moco_checkpoint(reference, path):
    """The reference's backbone saved as MoCo v3 saves its training state: the base encoder with a projector head,
    the momentum encoder and the predictor, under `module.` (DDP)."""
    state = {f"module.base_encoder.{k}": v for k, v in reference.state_dict().items() if not k.startswith("head.")}
    state.update({"module.base_encoder.head.0.weight": torch.randn(8, WIDTH), "module.predictor.0.weight":
                  torch.randn(8, 8), "module.momentum_encoder.cls_token": torch.randn(1, 1, WIDTH)})
    torch.save({"epoch": 100, "arch": "cast_base", "state_dict": state}, path)
    return path


def test_moco_checkpoint_drops_training_state(cast, tmp_path):
    reference, model, processor = cast
    loaded = load_original_checkpoint(save_moco_checkpoint(reference, tmp_path / "checkpoint_0099.pth.tar"))
    assert not any(key.startswith(("base_encoder.", "momentum_encoder.", "predictor.")) for key in loaded)
    backbone, _ = convert(loaded, num_clusters=CLUSTERS[:-1], num_segments=SEGMENTS)
    assert isinstance(backbone, CASTVisionModel)
    images, labels = torch.randn(1, 3, IMAGE, IMAGE), superpixels(1, seed=5, noisy=False)
    with torch.no_grad():
        torch.testing.assert_close(backbone(images, labels).pooler_output, reference(images, labels)[0],
                                   atol=1e-4, rtol=0)
    assert (processor.superpixel_method, processor.num_segments, processor.seeds_histogram_bins,
            processor.seeds_iterations, processor.resize_size) == ("seeds", SEGMENTS, 15, 20, int(IMAGE / 0.875))


def test_a_foreign_position_table_is_refused(cast):
    reference, _, _ = cast
    state = dict(reference.state_dict())
    state["pos_embed"] = torch.randn_like(state["pos_embed"])
    with pytest.raises(ValueError, match="sin-cos"):
        convert(state, num_clusters=CLUSTERS[:-1], num_segments=SEGMENTS)


def test_moco_checkpoint_with_other_weights_and_a_tokenizer_are_refused(cast, tmp_path):
    """Beside MoCo's base encoder only its training state (momentum encoder, predictor) may be dropped: any other
    weight is named in an error, never lost silently. CAST is an image model: a tokenizer is refused."""
    from helpers.builders import char_clip_tokenizer

    reference, _, _ = cast
    path = save_moco_checkpoint(reference, tmp_path / "checkpoint_0099.pth.tar")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"]["module.linear_probe.weight"] = torch.zeros(2, WIDTH)
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match="linear_probe.weight"):
        load_original_checkpoint(path)
    with pytest.raises(ValueError, match="no tokenizer"):
        convert(dict(reference.state_dict()), char_clip_tokenizer())


# ------------------------------------------------------------------- every released layout, on real SEEDS superpixels

RELEASED = dict(image=224, clusters=(*CAST_CLUSTERS, 8))  # cast_small's clusters at 224 px, 196 superpixels
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# rocket and astronaut hold SEEDS ids that own no stem cell, chelsea none; coffee with 100 superpixels (ids 0..99)
# beside 196-id maps is padded by the batch
PHOTOS = (("rocket", 196), ("chelsea", 196), ("astronaut", 196), ("coffee", 100))


def torchvision_eval_crop(image, resample):
    """torchvision's Resize(256, interpolation) + CenterCrop(224) on a PIL image, as written in torchvision's
    functional (the short edge to 256, the long one int(256 * long / short); offsets int(round((size - 224) / 2)))."""
    width, height = image.size
    short, long = min(width, height), max(width, height)
    size = (256, int(256 * long / short)) if width <= height else (int(256 * long / short), 256)
    image = image.resize(size, resample)
    left, top = int(round((image.width - 224) / 2.0)), int(round((image.height - 224) / 2.0))
    return image.crop((left, top, left + 224, top + 224))


def released_inputs(images, script, segments=None):
    """(pixel_values, superpixels) of PIL `images` as the release's evaluation computes them: moco-v3/
    main_lincls_suppix.py's transforms with suppix_utils/datasets_seeds.py (`script="cast.py"`), or deit/datasets.py's
    with deit/datasets_seeds.py (`"cast_deit.py"`); `segments` per image (196 by default)."""
    pixels, labels = [], []
    for image, count in zip(images, segments or [196] * len(images)):
        deit = script == "cast_deit.py"
        crop = torchvision_eval_crop(image, Image.Resampling.BICUBIC if deit else Image.Resampling.BILINEAR)
        sample = torch.from_numpy(np.array(crop)).permute(2, 0, 1).float().div(255)  # ToTensor
        normalized = (sample - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]  # Normalize
        if deit:  # the dataset receives normalised tensors and maps them back
            samp = normalized.numpy().transpose(1, 2, 0) * STD + MEAN
        else:
            samp = F.interpolate(sample.unsqueeze(0), scale_factor=1.0, mode="bilinear").squeeze(0)
            samp = samp.numpy().transpose(1, 2, 0)
        samp = cv2.cvtColor((samp * 255).astype(np.uint8), cv2.COLOR_RGB2LAB)
        seeds = cv2.ximgproc.createSuperpixelSEEDS(
            samp.shape[1], samp.shape[0], 3, num_superpixels=count, num_levels=1, prior=2,
            histogram_bins=5 if deit else 15, double_step=False)
        seeds.iterate(samp, num_iterations=15 if deit else 20)
        labels.append(torch.LongTensor(seeds.getLabels()))
        pixels.append(normalized)
    return torch.stack(pixels), torch.stack(labels)


def photos():
    import skimage.data

    return [Image.fromarray(getattr(skimage.data, name)()[..., :3]) for name, _ in PHOTOS]


def empty_ids(labels):
    """Per image: ids up to its largest that own no cell of the 28 x 28 stem grid (nearest downsampling)."""
    cells = F.interpolate(labels[:, None].float(), (28, 28), mode="nearest")[:, 0].long()
    return [int(label.max()) + 1 - len(cell.unique()) for label, cell in zip(labels, cells)]


def released_checkpoint(layout, path, seed):
    """A random cast_small-shaped model saved as `layout`'s script saves it; returns the reference and the path."""
    torch.manual_seed(seed)
    reference = CASTReference(**RELEASED, learned=layout == "deit").eval()
    randomize(reference, seed=seed + 1)
    state = reference.state_dict()
    if layout == "moco":  # moco-v3/main_moco_suppix.py
        return reference, save_moco_checkpoint(reference, path / "checkpoint_0099.pth.tar")
    if layout == "lincls":  # moco-v3/main_lincls_suppix.py: DDP keys, best_acc1 a tensor beside state_dict
        optimizer = torch.optim.SGD(reference.head.parameters(), lr=0.8, momentum=0.9)
        checkpoint = {"epoch": 100, "arch": "cast_small", "state_dict": {f"module.{k}": v for k, v in state.items()},
                      "best_acc1": torch.tensor(68.1), "optimizer": optimizer.state_dict()}
        path = path / "model_best.pth.tar"
    elif layout == "deit":  # deit/main_suppix.py's best_checkpoint.pth, with an EMA copy that must not be read
        ema = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in state.items()}
        checkpoint = {"model": state, "optimizer": {"state": {}, "param_groups": []}, "lr_scheduler": {"t": 1},
                      "epoch": 299, "model_ema": ema, "scaler": {"scale": 65536.0},
                      "args": argparse.Namespace(model="cast_small", num_superpixels=196, input_size=224)}
        path = path / "best_checkpoint.pth"
    else:  # a plain state dict with its head
        checkpoint, path = state, path / "cast_small.pth"
    torch.save(checkpoint, path)
    return reference, path


@pytest.fixture(scope="module")
def photo_inputs():
    images = photos()
    return {script: released_inputs(images, script, [count for _, count in PHOTOS])
            for script in ("cast.py", "cast_deit.py")}


@pytest.mark.parametrize("layout", ["moco", "lincls", "plain", "deit"])
def test_every_released_layout_matches_the_release_on_seeds_superpixels(layout, photo_inputs, tmp_path):
    """Each layout converts and gives the release's [CLS] features, first-stage tokens, first-pooling assignments
    and logits on one batch of SEEDS maps: images with ids that own no stem cell beside full ones, and a map of 100
    ids padded by the batch to 196."""
    reference, path = released_checkpoint(layout, tmp_path, seed=20)
    model, processor = convert(load_original_checkpoint(path))
    script = "cast_deit.py" if layout == "deit" else "cast.py"
    pixels, labels = photo_inputs[script]
    assert sum(empty_ids(labels)) >= 2 and labels[3].max() < 100 <= labels[0].max()
    assert isinstance(model, CASTVisionModel if layout == "moco" else CASTForImageClassification)
    assert model.config.empty_segments == "zero_tokens"
    assert model.config.position_embedding_type == ("learned" if layout == "deit" else "sincos")
    backbone = model if layout == "moco" else model.cast
    with torch.no_grad():
        out, logits, pool_logits, tokens = reference(pixels, labels)
        ours = backbone(pixels, labels)
        count = tokens[0].shape[1]  # the batch's largest id + 1: the release's tokens
        figures = {"features": (ours.pooler_output - out).abs().max().item(),
                   "stage-1 tokens": (ours.segment_tokens[0][:, :count] - tokens[0]).abs().max().item(),
                   "stage-1 assignment": (ours.assignments[0][:, :count]
                                          - pool_logits[0].softmax(-1)).abs().max().item()}
        if layout != "moco":
            figures["logits"] = (model(pixels, labels).logits - logits).abs().max().item()
    print(f"CAST {layout} on SEEDS maps (empty ids {empty_ids(labels)}):", {k: f"{v:.1e}" for k, v in figures.items()})
    assert max(figures.values()) < 1e-4 and out.abs().max() > 1e-2
    expected = RELEASED_PREPROCESSING[script]
    assert {key: getattr(processor, key) for key in expected} == expected


def test_empty_ids_and_batch_padding_change_the_release_output(photo_inputs, tmp_path):
    """What the release's zero tokens do, and what masking them instead (F-CAST's default) gives: an image with
    empty ids alone, and beside images with more ids. Both differ from the release beyond the parity tolerance."""
    reference, path = released_checkpoint("lincls", tmp_path, seed=30)
    model, _ = convert(load_original_checkpoint(path))
    masked = CASTForImageClassification(CASTVisionConfig(**{**model.config.to_dict(), "empty_segments": "masked"}))
    masked.load_state_dict(model.state_dict())
    pixels, labels = photo_inputs["cast.py"]
    with torch.no_grad():
        alone = reference(pixels[3:], labels[3:])[0]  # coffee: 100 ids, alone
        batched = reference(pixels, labels)[0]
        release_single = reference(pixels[:1], labels[:1])[0]  # rocket: empty ids, alone
        figures = {
            "release: 100-id map alone vs in the batch": (alone[0] - batched[3]).abs().max().item(),
            "masked vs release, empty ids alone": (masked.eval().cast(pixels[:1], labels[:1]).pooler_output
                                                   - release_single).abs().max().item(),
            "masked vs release, batched": (masked.cast(pixels, labels).pooler_output - batched).abs().max().item(),
            "zero_tokens vs release, batched": (model.cast(pixels, labels).pooler_output - batched).abs().max().item(),
            "zero_tokens vs release, 100-id map alone": (model.cast(pixels[3:], labels[3:]).pooler_output
                                                          - alone).abs().max().item(),
        }
    print("CAST empty ids:", {k: f"{v:.1e}" for k, v in figures.items()})
    assert figures["release: 100-id map alone vs in the batch"] > 1e-3
    assert figures["masked vs release, empty ids alone"] > 1e-3 and figures["masked vs release, batched"] > 1e-3
    assert figures["zero_tokens vs release, batched"] < 1e-4
    assert figures["zero_tokens vs release, 100-id map alone"] < 1e-4


@pytest.mark.parametrize("script", ["cast.py", "cast_deit.py"])
def test_converted_processor_computes_the_release_superpixels(script, photo_inputs):
    """The processor a conversion writes gives the pixels and SEEDS maps of the release's evaluation (transcribed
    above) exactly; SLIC stays an option."""
    reference = CASTReference(**RELEASED, learned=script == "cast_deit.py")
    _, processor = convert(dict(reference.state_dict()))
    pixels, labels = photo_inputs[script]
    inputs = processor(photos()[:3])
    torch.testing.assert_close(inputs["pixel_values"], pixels[:3], atol=1e-6, rtol=0)
    same = (inputs["superpixels"] == labels[:3]).float().mean().item()
    print(f"CAST processor ({script}): share of pixels with the release's SEEDS id: {same:.6f}")
    assert torch.equal(inputs["superpixels"], labels[:3])
    _, slic = convert(dict(reference.state_dict()), superpixel_method="slic")
    assert slic.superpixel_method == "slic" and not torch.equal(slic(photos()[:1])["superpixels"], labels[:1])


def test_unwrapping_finds_the_state_dict_and_names_what_it_cannot_read(tmp_path):
    """The state dict is found under state_dict / model (beside tensors such as best_acc1, an EMA copy, an argparse
    namespace); a weight no layout has, and an entry of the state dict that is not a tensor, are named."""
    reference, path = released_checkpoint("lincls", tmp_path, seed=40)
    assert "best_acc1" not in load_original_checkpoint(path) and "head.weight" in load_original_checkpoint(path)
    state = dict(reference.state_dict())
    state["blocks.0.ls1.gamma"] = torch.ones(WIDTH)
    with pytest.raises(ValueError, match=r"blocks\.0\.ls1\.gamma"):
        convert(state)
    torch.save({"state_dict": {**reference.state_dict(), "step": 3}}, tmp_path / "odd.pth")
    with pytest.raises(ValueError, match="'step'"):
        load_original_checkpoint(tmp_path / "odd.pth")


@pytest.mark.parametrize("prefix", [*WRAPPER_PREFIXES, "module._orig_mod."])
def test_unwrapping_strips_the_prefixes_wrappers_add(tmp_path, prefix):
    weights = {"blocks.0.norm1.weight": torch.ones(2), "head.bias": torch.zeros(1)}
    torch.save({"state_dict": {prefix + name: value for name, value in weights.items()}}, tmp_path / "wrapped.pth")
    assert list(load_original_checkpoint(tmp_path / "wrapped.pth")) == list(weights)


def test_converted_classifier_card_names_both_auto_classes(tmp_path):
    """A converted classifier is saved with AutoModel (its backbone) beside AutoModelForImageClassification in its
    auto_map, and its card says so; a converted MoCo backbone names AutoModel alone."""
    from hf_longclip.models.conversion import conversion_card, save_converted

    for layout, expected in (("lincls", "`AutoModelForImageClassification` (CASTForImageClassification) and "
                                        "`AutoModel` (CASTVisionModel)"),
                             ("moco", "with `AutoModel` (CASTVisionModel),")):
        _, path = released_checkpoint(layout, tmp_path, seed=60)
        model, processor = convert(load_original_checkpoint(path))
        save_converted(model, processor, tmp_path / layout)
        assert expected in str(conversion_card("cast", f"org/cast-{layout}", model=model, output_dir=tmp_path / layout))


@pytest.mark.slow
def test_converted_classifier_loads_with_automodel_and_automodel_for_classification(photo_inputs, tmp_path):
    """A linear-probe checkpoint through `hf-longclip convert cast`; without hf_longclip, AutoModel gives the
    backbone (CASTVisionModel) and AutoModelForImageClassification the classifier, and both, on the superpixels
    their processor computes, give the release's features and logits."""
    reference, path = released_checkpoint("lincls", tmp_path, seed=50)
    output = tmp_path / "converted"
    main(["convert", "cast", str(path), str(output)])
    config = json.loads((output / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_cast.CASTVisionModel"
    assert config["auto_map"]["AutoModelForImageClassification"] == "modeling_cast.CASTForImageClassification"
    photos()[0].save(tmp_path / "rocket.png")
    script = """
import json, sys
sys.modules["hf_longclip"] = None
import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoModel, AutoModelForImageClassification
backbone = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
classifier = AutoModelForImageClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
processor = AutoImageProcessor.from_pretrained(sys.argv[1], trust_remote_code=True)
inputs = processor(Image.open(sys.argv[2]))
with torch.no_grad():
    print(json.dumps({"classes": [type(backbone).__name__, type(classifier).__name__],
                      "superpixels": inputs["superpixels"].tolist(), "pixel_values": inputs["pixel_values"].tolist(),
                      "features": backbone(**inputs).pooler_output.tolist(),
                      "logits": classifier(**inputs).logits.tolist()}))
"""
    proc = fresh_process(script, str(output), str(tmp_path / "rocket.png"), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["classes"] == ["CASTVisionModel", "CASTForImageClassification"]
    pixels, labels = torch.tensor(loaded["pixel_values"]), torch.tensor(loaded["superpixels"])
    assert torch.equal(labels, photo_inputs["cast.py"][1][:1]) and empty_ids(labels) != [0]
    with torch.no_grad():
        out, logits, _, _ = reference(pixels, labels)
    figures = {"features": (torch.tensor(loaded["features"]) - out).abs().max().item(),
               "logits": (torch.tensor(loaded["logits"]) - logits).abs().max().item()}
    print("CAST loaded without hf_longclip:", {k: f"{v:.1e}" for k, v in figures.items()})
    assert max(figures.values()) < 1e-4
