"""TULIP checkpoints converted into OneLIPModel, checked against a transcription of TULIP's released forward.

Reference: github.com/ivonajdenkoska/tulip (TULIP's code; mderakhshani/TULIP is the same project), commit
906e3f977685ee8b6dc9bc130f8ea14e3a3028d4, file open_clip/transformer_rope.py: `TextTransformerRoPE`,
`TransformerRoPe`, `CustomResidualAttentionBlockRoPE`, `AttentionRoPE`, `apply_rotary_emb`, `precompute_freqs_cis`
(the inference path of eval_tulip.py: `TextTransformerRoPE(context_length=248)`, plain RoPE) and
`precompute_freqs_cis_dynamic_ntk_scaling` (its second training stage), and its `VisionTransformer` (open_clip's,
transcribed here with torch's own `nn.MultiheadAttention`). Random tiny weights are saved as TULIP saves them
(`{"state_dict": {"module." + key: tensor}}`) and read back with `torch.load(weights_only=True)`.
"""

import math
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hf_longclip import OneLIPModel
from hf_longclip.modeling_common.positions import ntk_inverse_frequencies
from hf_longclip.models.onelip.convert_tulip import convert

VOCAB, TEXT_WIDTH, TEXT_HEADS, VISION_WIDTH, EMBED = 1000, 128, 2, 128, 64
IMAGE, PATCH = 32, 8


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ResidualBlock(nn.Module):
    """open_clip's pre-norm block; `attn` holds the released key names (in_proj_weight/bias, out_proj)."""

    def __init__(self, width, heads, act):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads)
        self.mlp = nn.Sequential(OrderedDict(c_fc=nn.Linear(width, 4 * width), gelu=act(),
                                             c_proj=nn.Linear(4 * width, width)))

    def rotary_attention(self, x, mask, freqs_cis):
        """AttentionRoPE.forward: q, k, v from the fused projection, (N, L, heads, d); q and k rotated as complex
        pairs (2i, 2i + 1) by freqs_cis (L, d/2); softmax(q k^T / sqrt(d) + mask) v; out_proj."""
        length, batch, width = x.shape
        q, k, v = F.linear(x, self.attn.in_proj_weight, self.attn.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.permute(1, 0, 2).reshape(batch, length, self.heads, -1) for t in (q, k, v))

        def rotate(t):
            pairs = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
            return torch.view_as_real(pairs * freqs_cis[None, :, None]).flatten(3).type_as(t)

        q, k = rotate(q), rotate(k)
        q, k, v = (t.permute(0, 2, 1, 3).reshape(batch * self.heads, length, -1) for t in (q, k, v))
        attn = torch.bmm(q * q.shape[-1] ** -0.5, k.transpose(-1, -2)) + mask
        out = torch.bmm(attn.softmax(dim=-1), v)
        out = out.view(batch, self.heads, length, -1).permute(2, 0, 1, 3).reshape(length, batch, width)
        return self.attn.out_proj(out)

    def forward(self, x, mask=None, freqs_cis=None):
        h = self.ln_1(x)
        if freqs_cis is None:
            h = self.attn(h, h, h, need_weights=False, attn_mask=mask)[0]
        else:
            h = self.rotary_attention(h, mask, freqs_cis)
        x = x + h
        return x + self.mlp(self.ln_2(x))


class Blocks(nn.Module):
    def __init__(self, width, heads, layers, act):
        super().__init__()
        self.resblocks = nn.ModuleList([ResidualBlock(width, heads, act) for _ in range(layers)])


class VisionReference(nn.Module):
    """open_clip's VisionTransformer (pool 'tok', ln_post before pooling, proj)."""

    def __init__(self, act):
        super().__init__()
        grid = IMAGE // PATCH
        self.conv1 = nn.Conv2d(3, VISION_WIDTH, PATCH, PATCH, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(VISION_WIDTH))
        self.positional_embedding = nn.Parameter(torch.randn(grid * grid + 1, VISION_WIDTH))
        self.ln_pre, self.ln_post = nn.LayerNorm(VISION_WIDTH), nn.LayerNorm(VISION_WIDTH)
        self.transformer = Blocks(VISION_WIDTH, VISION_WIDTH // 64, 2, act)
        self.proj = nn.Parameter(torch.randn(VISION_WIDTH, EMBED))

    def forward(self, images):
        x = self.conv1(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_embedding.expand(x.shape[0], 1, -1), x], dim=1) + self.positional_embedding
        x = self.ln_pre(x).permute(1, 0, 2)
        for block in self.transformer.resblocks:
            x = block(x)
        return self.ln_post(x.permute(1, 0, 2))[:, 0] @ self.proj


class TulipReference(nn.Module):
    """TULIP's CLIP after stage 2: the ViT, the RoPE student's text modules, CLIP's projection and logit scale (and
    CLIP's position table, which nothing reads)."""

    def __init__(self, context_length, vision_act=QuickGELU):
        super().__init__()
        self.visual = VisionReference(vision_act)
        self.token_embedding = nn.Embedding(VOCAB, TEXT_WIDTH)
        self.positional_embedding = nn.Parameter(torch.randn(77, TEXT_WIDTH))
        self.transformer = Blocks(TEXT_WIDTH, TEXT_HEADS, 2, nn.GELU)  # TextTransformerRoPE's default act_layer
        self.ln_final = nn.LayerNorm(TEXT_WIDTH)
        self.text_projection = nn.Parameter(torch.randn(TEXT_WIDTH, EMBED))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.context_length = context_length
        head_dim = TEXT_WIDTH // TEXT_HEADS  # precompute_freqs_cis(width // heads, max_seq_len * 2)
        freqs = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim)
        angles = torch.outer(torch.arange(context_length * 2).float(), freqs)
        self.freqs_cis = torch.polar(torch.ones_like(angles), angles)

    def encode_text(self, text):
        """TextTransformerRoPE.forward on texts padded (with 0, as open_clip's tokenizer) to context_length."""
        length = text.shape[1]
        mask = torch.full((length, length), float("-inf")).triu_(1)
        x = self.token_embedding(text).permute(1, 0, 2)
        for block in self.transformer.resblocks:
            x = block(x, mask, self.freqs_cis[:length])
        x = self.ln_final(x.permute(1, 0, 2))
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection


def randomize(module: nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_pre.weight", "ln_post.weight", "ln_final.weight")):
                tensor.copy_(1 + 0.1 * torch.randn(tensor.shape, generator=generator))
            elif name != "logit_scale":
                tensor.copy_(0.05 * torch.randn(tensor.shape, generator=generator))


def released_checkpoint(reference: nn.Module, tmp_path) -> dict[str, torch.Tensor]:
    """The reference's weights saved as TULIP's training saves them, read back as the converter's caller does."""
    path = tmp_path / "epoch_1.pt"
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, path)
    checkpoint = torch.load(path, weights_only=True)
    return {key.removeprefix("module."): value for key, value in checkpoint["state_dict"].items()}


def token_ids(length: int, context_length: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    """open_clip-style rows: start token, random ids, end token (the largest id), zero padding."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.zeros(batch, context_length, dtype=torch.long)
    rows[:, 1 : length - 1] = torch.randint(1, VOCAB - 2, (batch, length - 2), generator=generator)
    rows[:, 0], rows[:, length - 1] = VOCAB - 2, VOCAB - 1
    return rows


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    torch.manual_seed(0)
    reference = TulipReference(context_length=300).eval()
    randomize(reference, seed=1)
    model, processor = convert(released_checkpoint(reference, tmp_path_factory.mktemp("tulip")), max_length=300)
    assert processor is None  # no tokenizer given
    return reference, model


@pytest.mark.parametrize("length", [10, 100, 240, 260])
def test_text_features_match_tulips_rotary_forward(converted, length):
    reference, model = converted
    context = 248 if length <= 248 else 300  # what TULIP's tokenizer pads to (context_length)
    ids = token_ids(length, context, seed=length)
    with torch.no_grad():
        expected = reference.encode_text(ids)
        ours = model.get_text_features(input_ids=ids).pooler_output
    difference = (ours - expected).abs().max().item()
    print(f"TULIP text, {length} tokens: max abs diff {difference:.2e}")
    assert difference < 1e-4
    assert expected.abs().max() > 1e-2  # features of a real size, not a vanishing signal


def test_image_features_and_logits_match(converted):
    reference, model = converted
    images = torch.randn(3, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(2))
    ids = token_ids(100, 248)
    with torch.no_grad():
        expected_images = reference.visual(images)
        ours = model(input_ids=ids, pixel_values=images)
        expected_text = reference.encode_text(ids)
    difference = (ours.vision_model_output.pooler_output - expected_images).abs().max().item()
    print(f"TULIP images: max abs diff {difference:.2e}")
    assert difference < 1e-4
    logits = reference.logit_scale.exp() * F.normalize(expected_images, dim=-1) @ F.normalize(expected_text, dim=-1).T
    assert (ours.logits_per_image - logits).abs().max() < 1e-4


def test_rope_pairing_matters(converted, tmp_path, monkeypatch):
    """The row permutation is what makes TULIP's pairs transformers' pairs: without it the features differ."""
    from hf_longclip.models.onelip import convert_tulip

    reference, _ = converted
    monkeypatch.setattr(convert_tulip, "interleaved_to_half_split", lambda weight, heads: weight)
    unpermuted, _ = convert(released_checkpoint(reference, tmp_path), max_length=300)
    ids = token_ids(100, 248)
    with torch.no_grad():
        assert (unpermuted.get_text_features(input_ids=ids).pooler_output - reference.encode_text(ids)).abs().max() > 1e-3


def test_onelip_ntk_frequencies_equal_tulips_training_stage():
    """TULIP's second stage sets precompute_freqs_cis_dynamic_ntk_scaling(dim, new_end, end, s): base
    theta * (s * new_end / end - (s - 1)) ** (d / (d - 2)); OneLIP's NTK scaling is the same function."""
    dim, new_end, end, s = 64, 248, 77, 8.0
    theta = 10000.0 * ((s * new_end / end) - (s - 1)) ** (dim / (dim - 2))
    tulip = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    torch.testing.assert_close(ntk_inverse_frequencies(dim, end, new_end, s), tulip)


def test_converted_model_saves_and_reloads(converted, tmp_path):
    _, model = converted
    model.save_pretrained(tmp_path)
    reloaded = OneLIPModel.from_pretrained(tmp_path).eval()
    assert reloaded.config.text_config.rope_ntk_scaling is False
    ids = token_ids(240, 248)
    with torch.no_grad():
        torch.testing.assert_close(reloaded.get_text_features(input_ids=ids).pooler_output,
                                   model.get_text_features(input_ids=ids).pooler_output)


def test_unknown_keys_are_refused(converted, tmp_path):
    reference, _ = converted
    state = released_checkpoint(reference, tmp_path)
    state["visual.attnpool.positional_embedding"] = torch.zeros(1)
    with pytest.raises(ValueError, match="attnpool"):
        convert(state)
    del state["visual.attnpool.positional_embedding"], state["ln_final.weight"]
    with pytest.raises(ValueError, match="ln_final.weight"):
        convert(state)
