"""TULIP and FLAIR checkpoints (both open_clip's layout) converted into OneLIPModel and FCASTModel, checked against
transcriptions of their released forwards.

TULIP's reference: github.com/ivonajdenkoska/tulip (TULIP's code; mderakhshani/TULIP is the same project), commit
906e3f977685ee8b6dc9bc130f8ea14e3a3028d4, file open_clip/transformer_rope.py: `TextTransformerRoPE`,
`TransformerRoPe`, `CustomResidualAttentionBlockRoPE`, `AttentionRoPE`, `apply_rotary_emb`, `precompute_freqs_cis`
(the inference path of eval_tulip.py: `TextTransformerRoPE(context_length=248)`, plain RoPE) and
`precompute_freqs_cis_dynamic_ntk_scaling` (its second training stage), and its `VisionTransformer` (open_clip's,
transcribed here with torch's own `nn.MultiheadAttention`). Random tiny weights are saved as TULIP saves them
(`{"state_dict": {"module." + key: tensor}}`) and read back by `load_original_checkpoint`, as `hf-longclip convert`
reads them.

FLAIR's reference: github.com/xiaorui638/flair, files src/flair/model.py (class `FLAIR`: `encode_image`,
`encode_text`, `get_logits`, `get_logits_as_clip`) and src/flair/transformer.py (`PureAttentionPoolingBlock`,
`VisionPostProcess`, `TextPostProcess`, `VisionTransformer` with `text_con=True`), read in the verbatim copy kept by
github.com/lezhang7/colxlip (src/flair/model.py at commit 21be41947f30513341bab8d32d761bd4668c2e2b,
src/flair/transformer.py at 579d3323e55faebba433d38aaa26052d2607fc94; the index here holds no snapshot of
xiaorui638/flair itself). FLAIR saves a plain state dict.

Each format also goes end to end once: `hf-longclip convert FORMAT CHECKPOINT OUT --bpe-file ...`, then AutoModel /
AutoProcessor (trust_remote_code) in a fresh offline process where hf_longclip is not importable.
"""

import math
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.conversion import open_clip_bpe_file, run_converted_offline
from hf_longclip import OneLIPModel
from hf_longclip.cli import main
from hf_longclip.modeling_common.positions import ntk_inverse_frequencies
from hf_longclip.models.conversion import load_original_checkpoint
from hf_longclip.models.onelip.convert_tulip import convert

VOCAB, TEXT_WIDTH, TEXT_HEADS, VISION_WIDTH, EMBED = 1000, 128, 2, 128, 64
CLIP_VOCAB = 49408  # OpenAI's BPE vocabulary: the end-to-end tests tokenize with it
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
    """open_clip's VisionTransformer (pool 'tok', ln_post before pooling, then `proj`; FLAIR's variant `text_con`
    has no `proj` and returns the [CLS] and patch tokens after ln_post)."""

    def __init__(self, act, proj=True):
        super().__init__()
        grid = IMAGE // PATCH
        self.conv1 = nn.Conv2d(3, VISION_WIDTH, PATCH, PATCH, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(VISION_WIDTH))
        self.positional_embedding = nn.Parameter(torch.randn(grid * grid + 1, VISION_WIDTH))
        self.ln_pre, self.ln_post = nn.LayerNorm(VISION_WIDTH), nn.LayerNorm(VISION_WIDTH)
        self.transformer = Blocks(VISION_WIDTH, VISION_WIDTH // 64, 2, act)
        self.proj = nn.Parameter(torch.randn(VISION_WIDTH, EMBED)) if proj else None

    def tokens(self, images):
        x = self.conv1(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_embedding.expand(x.shape[0], 1, -1), x], dim=1) + self.positional_embedding
        x = self.ln_pre(x).permute(1, 0, 2)
        for block in self.transformer.resblocks:
            x = block(x)
        return self.ln_post(x.permute(1, 0, 2))

    def forward(self, images):
        return self.tokens(images)[:, 0] @ self.proj


class TulipReference(nn.Module):
    """TULIP's CLIP after stage 2: the ViT, the RoPE student's text modules, CLIP's projection and logit scale (and
    CLIP's position table, which nothing reads)."""

    def __init__(self, context_length, vision_act=QuickGELU, vocab=VOCAB):
        super().__init__()
        self.visual = VisionReference(vision_act)
        self.token_embedding = nn.Embedding(vocab, TEXT_WIDTH)
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
    """The reference's weights saved as TULIP's training saves them, read back as `hf-longclip convert` reads them."""
    return load_original_checkpoint(save_tulip_checkpoint(reference, tmp_path / "epoch_1.pt"))


def save_tulip_checkpoint(reference: nn.Module, path):
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, path)
    return path


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
        assert (unpermuted.get_text_features(input_ids=ids).pooler_output
                - reference.encode_text(ids)).abs().max() > 1e-3


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


class FlairPoolingReference(nn.Module):
    """PureAttentionPoolingBlock: LayerNorms on queries, keys and values, torch's multi-head attention (8 heads,
    batch first) with a zero key/value appended."""

    def __init__(self, dim):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 8, kdim=dim, vdim=dim, batch_first=True, add_zero_attn=True)
        self.ln_q, self.ln_k, self.ln_v = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, q, k, v):
        return self.attn(self.ln_q(q), self.ln_k(k), self.ln_v(v), need_weights=False)[0]


class PostProcessReference(nn.Module):
    """VisionPostProcess / TextPostProcess with skip_ln=True, normalize_final=False: x @ proj."""

    def __init__(self, width):
        super().__init__()
        self.proj = nn.Parameter(torch.randn(width, EMBED))

    def forward(self, x):
        return x @ self.proj


class FlairReference(nn.Module):
    def __init__(self, vocab=VOCAB):
        super().__init__()
        self.visual = VisionReference(nn.GELU, proj=False)
        self.visual_proj = FlairPoolingReference(EMBED)
        self.token_embedding = nn.Embedding(vocab, TEXT_WIDTH)
        self.positional_embedding = nn.Parameter(torch.randn(77, TEXT_WIDTH))
        self.transformer = Blocks(TEXT_WIDTH, TEXT_HEADS, 2, nn.GELU)
        self.ln_final = nn.LayerNorm(TEXT_WIDTH)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.logit_bias = nn.Parameter(torch.tensor(-10.0))
        self.image_post, self.text_post = PostProcessReference(VISION_WIDTH), PostProcessReference(TEXT_WIDTH)

    def encode_image(self, images):
        tokens = self.visual.tokens(images)
        return tokens[:, 0], tokens[:, 1:]

    def encode_text(self, text):
        mask = torch.full((77, 77), float("-inf")).triu_(1)
        x = (self.token_embedding(text) + self.positional_embedding).permute(1, 0, 2)
        for block in self.transformer.resblocks:
            x = block(x, mask)
        x = self.ln_final(x.permute(1, 0, 2))
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)]

    def get_logits(self, images, text):
        """FLAIR's text-conditioned logits (B images, T texts) and the conditioned image features (B, T, D)."""
        global_image, local_image = self.encode_image(images)
        global_text = self.text_post(self.encode_text(text))
        local_image = self.image_post(local_image)
        queries = global_text.unsqueeze(0).expand(images.shape[0], -1, -1)
        conditioned = self.visual_proj(queries, local_image, local_image)
        logits = self.logit_scale.exp() * torch.einsum(
            "bij,bij->bi", F.normalize(conditioned, dim=-1), F.normalize(queries, dim=-1)) + self.logit_bias
        return logits, conditioned

    def get_logits_as_clip(self, images, text):
        image = F.normalize(self.image_post(self.encode_image(images)[0]), dim=-1)
        return self.logit_scale.exp() * image @ F.normalize(self.text_post(self.encode_text(text)), dim=-1).T


@pytest.fixture(scope="module")
def flair(tmp_path_factory):
    from hf_longclip.models.fcast.convert_flair import convert as convert_flair

    torch.manual_seed(3)
    reference = FlairReference().eval()
    randomize(reference, seed=4)
    path = tmp_path_factory.mktemp("flair") / "flair-cc3m-recap.pt"
    torch.save(reference.state_dict(), path)
    model, processor = convert_flair(load_original_checkpoint(path))
    assert processor is None
    return reference, model


@pytest.mark.parametrize("length", [10, 77])
def test_flair_text_features_match(flair, length):
    """FLAIR reads 77 tokens (its tokenizer truncates longer captions, the end token last)."""
    reference, model = flair
    ids = token_ids(length, 77, seed=length)
    with torch.no_grad():
        expected = reference.text_post(reference.encode_text(ids))
        ours = model.get_text_features(input_ids=ids).pooler_output
    difference = (ours - expected).abs().max().item()
    print(f"FLAIR text, {length} tokens: max abs diff {difference:.2e}")
    assert difference < 1e-4 and expected.abs().max() > 1e-2


def test_flair_image_features_and_both_logits_match(flair):
    """Global features and get_logits_as_clip; the text-conditioned features and get_logits through our
    text-grounded pooling (`get_grounding` with every text given to every image)."""
    reference, model = flair
    images = torch.randn(3, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(5))
    ids = token_ids(40, 77, batch=4)
    with torch.no_grad():
        expected_logits, expected_conditioned = reference.get_logits(images, ids)
        ours = model(input_ids=ids, pixel_values=images)
        grounding = model.get_grounding(images, None, ids[None].expand(3, -1, -1))
        expected_image = reference.image_post(reference.encode_image(images)[0])
    figures = {
        "image features": (ours.vision_model_output.pooler_output - expected_image).abs().max().item(),
        "CLIP-style logits": (ours.logits_per_image - ours.logit_bias - reference.get_logits_as_clip(images, ids))
        .abs().max().item(),
        "text-conditioned image features": (grounding.pooler_output - expected_conditioned).abs().max().item(),
    }
    text = F.normalize(ours.text_model_output.pooler_output, dim=-1)
    logits = ours.logit_scale * (F.normalize(grounding.pooler_output, dim=-1) * text).sum(-1) + ours.logit_bias
    figures["text-conditioned logits"] = (logits - expected_logits).abs().max().item()
    print("FLAIR:", {name: f"{value:.2e}" for name, value in figures.items()})
    assert max(figures.values()) < 1e-4
    assert expected_conditioned.abs().max() > 1e-2 and expected_image.abs().max() > 1e-2
    assert grounding.segment_attention.sum(-1).max() < 1  # the zero key takes a share: FLAIR's add_zero_attn


def test_fcast_default_pooling_is_unchanged():
    """F-CAST's own configuration keeps its pooling (one norm for keys and values, no zero key, raw tokens)."""
    from hf_longclip import FCASTConfig, FCASTModel

    model = FCASTModel(FCASTConfig(vision_backbone="vit", vision_config=dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8),
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         vocab_size=50), projection_dim=16, pool_heads=2))
    pool = model.grounding_pool
    assert pool.value_norm is None and not pool.attention.add_zero_attn and pool.attention.kdim == 32
    with pytest.raises(ValueError, match="attention_pooling"):
        FCASTConfig(attention_pooling="flat")


def test_a_tokenizer_of_another_vocabulary_is_refused(converted, tmp_path):
    """open_clip pools at the largest id: a tokenizer whose end token is another id would pool elsewhere."""
    from helpers.builders import char_clip_tokenizer

    reference, _ = converted
    with pytest.raises(ValueError, match="largest token id"):
        convert(released_checkpoint(reference, tmp_path), char_clip_tokenizer())


# ------------------------------------------------------------------------------------------ end to end, fresh process

LONG_CAPTION = ("a small white puppy with black ears sits on a wooden floor in front of a closed white door, "
                "a window to its right lets in the afternoon light, and a red ball lies next to its front paws. ") * 6
ENCODE_IN_FRESH_PROCESS = """
inputs = processor(text=[CAPTION], images=[np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)],
                   return_tensors="pt")
result["ids"] = inputs["input_ids"].reshape(-1).tolist()
result["pixel_values"] = inputs["pixel_values"].tolist()
result["text"] = model.get_text_features(input_ids=inputs["input_ids"]).pooler_output[0].tolist()
result["image"] = model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output[0].tolist()
"""


def convert_and_load_offline(format: str, checkpoint, tmp_path) -> dict:
    """`hf-longclip convert FORMAT CHECKPOINT OUT --bpe-file ...`, then the long caption and an image through the
    output loaded in a fresh offline process without hf_longclip."""
    output = tmp_path / "converted"
    main(["convert", format, str(checkpoint), str(output), "--bpe-file", str(open_clip_bpe_file())])
    return run_converted_offline(output, tmp_path, ENCODE_IN_FRESH_PROCESS.replace("CAPTION", repr(LONG_CAPTION)))


def check_fresh_process_features(loaded, expected_text, expected_image, length, model, processor):
    from hf_longclip.models.conversion import clip_tokenizer

    ids = clip_tokenizer(bpe_file=open_clip_bpe_file())(LONG_CAPTION, truncation=True, max_length=length)["input_ids"]
    assert loaded["model"] == model and loaded["processor"] == processor
    assert len(loaded["ids"]) == length and loaded["ids"] == ids and ids[-1] == CLIP_VOCAB - 1  # end token kept
    figures = {"text": (torch.tensor(loaded["text"]) - expected_text).abs().max().item(),
               "image": (torch.tensor(loaded["image"]) - expected_image).abs().max().item()}
    print(f"{model} loaded without hf_longclip:", {k: f"{v:.2e}" for k, v in figures.items()})
    assert max(figures.values()) < 1e-4 and expected_text.abs().max() > 1e-2


@pytest.mark.slow
def test_tulip_converts_end_to_end_and_loads_without_the_library(tmp_path):
    torch.manual_seed(6)
    reference = TulipReference(context_length=248, vocab=CLIP_VOCAB).eval()
    randomize(reference, seed=7)
    loaded = convert_and_load_offline("tulip", save_tulip_checkpoint(reference, tmp_path / "epoch_1.pt"), tmp_path)
    with torch.no_grad():
        expected_text = reference.encode_text(torch.tensor([loaded["ids"]]))[0]
        expected_image = reference.visual(torch.tensor(loaded["pixel_values"]))[0]
    check_fresh_process_features(loaded, expected_text, expected_image, 248, "OneLIPModel", "OneLIPProcessor")


@pytest.mark.slow
def test_flair_converts_end_to_end_and_loads_without_the_library(tmp_path):
    torch.manual_seed(8)
    reference = FlairReference(vocab=CLIP_VOCAB).eval()
    randomize(reference, seed=9)
    torch.save(reference.state_dict(), tmp_path / "flair-cc3m-recap.pt")
    loaded = convert_and_load_offline("flair", tmp_path / "flair-cc3m-recap.pt", tmp_path)
    with torch.no_grad():
        expected_text = reference.text_post(reference.encode_text(torch.tensor([loaded["ids"]])))[0]
        expected_image = reference.image_post(reference.encode_image(torch.tensor(loaded["pixel_values"]))[0])[0]
    check_fresh_process_features(loaded, expected_text, expected_image, 77, "FCASTModel", "FCASTProcessor")
