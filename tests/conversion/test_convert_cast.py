"""CAST checkpoints converted into CASTForImageClassification / CASTVisionModel, checked against a transcription of
the released forward: github.com/twke18/CAST at commit 344d71767711dd89d153528260ff62baa8723c27, files
cast_models/cast.py (`CAST.forward_features`, `build_2d_sincos_position_embedding`, `ConvStem`, `Pooling`),
cast_models/graph_pool.py (`GraphPooling`, its `Block`, `Attention`; dgl's `farthest_point_sampler` written out in
float64 as dgl runs it) and cast_models/utils.py (`segment_mean_nd`). timm's `Block` (pre-norm, fused qkv) is
written out too (timm does not import beside this torch). Random tiny weights are saved as a DeiT-style checkpoint
(`{"model": state_dict}`) and as MoCo v3's (`module.base_encoder.` keys, a projector head, the momentum encoder),
read back by `load_original_checkpoint` as `hf-longclip convert` reads them; the MoCo one also goes end to end once
(`hf-longclip convert cast`, then AutoModel / AutoProcessor in a fresh offline process without hf_longclip).
"""

import pytest
import torch
import torch.nn.functional as F
from helpers.conversion import run_converted_offline
from torch import nn

from hf_longclip import CASTForImageClassification, CASTVisionModel
from hf_longclip.cli import main
from hf_longclip.conversion import load_original_checkpoint
from hf_longclip.models.cast.convert_cast import convert

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
    def __init__(self, image=IMAGE, clusters=CLUSTERS):
        super().__init__()
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
        grid = image // 8  # build_2d_sincos_position_embedding, meshgrid of (w, h) in 'ij' order
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
        x = x + segment_mean_nd(self.pos_embed.view(1, height, width, channels).expand(batch, -1, -1, -1), labels)
        cls_token = self.cls_token.expand(batch, -1, -1) + self.pe_token
        logits = []
        for stage in range(1, len(DEPTHS) + 1):
            cls_x = getattr(self, f"blocks{stage}")(torch.cat([cls_token, x], dim=1))
            cls_token, x, logit = getattr(self, f"pool{stage}").pool_block(cls_x[:, :1], cls_x[:, 1:], mask)
            mask = torch.zeros(logit.shape[0], logit.shape[-1], dtype=torch.bool)
            logits.append(logit)
        out = self.norm(cls_x)[:, 0]
        return out, self.head(out), logits


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
        out, logits, pool_logits = reference(images, labels)
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
    assert processor.superpixel_method == "slic" and processor.num_segments == SEGMENTS


def test_a_foreign_position_table_is_refused(cast):
    reference, _, _ = cast
    state = dict(reference.state_dict())
    state["pos_embed"] = torch.randn_like(state["pos_embed"])
    with pytest.raises(ValueError, match="sin-cos"):
        convert(state, num_clusters=CLUSTERS[:-1], num_segments=SEGMENTS)


@pytest.mark.slow
def test_cast_converts_end_to_end_and_loads_without_the_library(tmp_path):
    """A MoCo checkpoint at 224 px through `hf-longclip convert cast` (the released settings: 196 SLIC segments,
    64 / 32 / 16 clusters); the output's processor and model, loaded without hf_longclip, give the released
    forward's features on the superpixels that processor computed."""
    from hf_longclip.models.cast.convert_cast import CAST_CLUSTERS

    torch.manual_seed(10)
    reference = CASTReference(image=224, clusters=(*CAST_CLUSTERS, 8)).eval()
    randomize(reference, seed=11)
    output = tmp_path / "converted"
    main(["convert", "cast", str(save_moco_checkpoint(reference, tmp_path / "checkpoint_0099.pth.tar")), str(output)])
    loaded = run_converted_offline(output, tmp_path, """
y, x = np.mgrid[0:240, 0:256]  # colour ramps and stripes: SLIC finds one segment in pure noise
inputs = processor(images=[np.stack([x, y, (x + y) % 64 * 4], axis=-1).astype(np.uint8)])
result["pixel_values"], result["superpixels"] = inputs["pixel_values"].tolist(), inputs["superpixels"].tolist()
result["features"] = model(**inputs).pooler_output[0].tolist()
""")
    assert loaded["model"] == "CASTVisionModel" and loaded["processor"] == "CASTImageProcessor"
    superpixels = torch.tensor(loaded["superpixels"])
    assert superpixels.shape == (1, 224, 224) and superpixels.max() > 100  # SLIC's segments (196 asked)
    with torch.no_grad():
        expected = reference(torch.tensor(loaded["pixel_values"]), superpixels)[0][0]
    difference = (torch.tensor(loaded["features"]) - expected).abs().max().item()
    print(f"CAST loaded without hf_longclip: max abs diff {difference:.2e}")
    assert difference < 1e-4 and expected.abs().max() > 1e-2


def test_moco_checkpoint_with_other_weights_and_a_tokenizer_are_refused(cast, tmp_path):
    """Beside MoCo's base encoder only its training state (momentum encoder, predictor) may be dropped: any other
    weight is named in an error, never lost silently. CAST is an image model: a tokenizer is refused."""
    from conftest import char_clip_tokenizer

    reference, _, _ = cast
    path = save_moco_checkpoint(reference, tmp_path / "checkpoint_0099.pth.tar")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"]["module.linear_probe.weight"] = torch.zeros(2, WIDTH)
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match="linear_probe.weight"):
        load_original_checkpoint(path)
    with pytest.raises(ValueError, match="no tokenizer"):
        convert(dict(reference.state_dict()), char_clip_tokenizer())
