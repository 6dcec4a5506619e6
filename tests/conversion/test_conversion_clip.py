"""Released checkpoints into our classes (issue 27): the openai, open_clip, longclip and himo formats.

Parity is checked against code nobody here wrote, on random tiny weights saved as each release is (OpenAI: a
TorchScript archive in float16, traced as
OpenAI's were (open_clip's `trace_model` fails on its own tuple image size); open_clip: a training checkpoint with
`module.` prefixes; Long-CLIP / HiMo-CLIP: a float16 state dict with two 248-row position tables):
- open_clip (PyPI `open_clip_torch`, installed with `--no-deps`) for the OpenAI and open_clip layouts. `import
  open_clip` imports torchvision, which does not import beside the CPU build of torch 2.13, for its transforms and
  for `FrozenBatchNorm2d` (`open_clip.utils`, used by ResNet freezing only). `open_clip_modules` loads the model
  modules without the package `__init__` and gives `torchvision.ops.misc` a placeholder class in place of that one
  import, which no ViT forward touches (a second environment with torch 2.14 + torchvision costs 5.5 GB per CI run).
- Long-CLIP's two position tables: its released forward, transcribed in `released_longclip_text`.
"""

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from helpers.builders import tiny_clip
from helpers.conversion import run_converted_offline
from helpers.numerics import rounding_atol
from hf_longclip import HiMoCLIPModel
from hf_longclip.cli import main
from hf_longclip.models.conversion import clip_tokenizer, conversion_card, convert_checkpoint, load_original_checkpoint
from hf_longclip.recipes.himo_clip.task import HiMoCLIPTask
from hf_longclip.training.optimizer import parameter_groups

WIDTH, LAYERS, IMAGE, PATCH, EMBED, VOCAB = 128, 2, 32, 8, 32, 49408  # 2 heads of 64 in each tower
TOLERANCE = 1e-4


def open_clip_modules():
    """open_clip's `model` and `tokenizer` modules, imported without the package `__init__` (see the docstring)."""
    stubs = {}
    if "open_clip" not in sys.modules:  # else placed by an earlier call (a test module importing this one)
        spec = importlib.util.find_spec("open_clip")
        if spec is None:
            raise RuntimeError("the parity tests need open_clip: pip install --no-deps open_clip_torch==3.3.0 ftfy")
        package = types.ModuleType("open_clip")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["open_clip"] = package
        if importlib.util.find_spec("torchvision") is None:  # only its FrozenBatchNorm2d is named, by open_clip.utils
            misc = types.ModuleType("torchvision.ops.misc")
            misc.FrozenBatchNorm2d = type("FrozenBatchNorm2d", (), {})
            stubs = {"torchvision": types.ModuleType("torchvision"), "torchvision.ops": types.ModuleType("x"),
                     "torchvision.ops.misc": misc}
    sys.modules.update(stubs)
    try:
        import open_clip.model
        import open_clip.tokenizer
    finally:  # the placeholder leaves no trace: transformers' own checks for torchvision stay truthful
        for name in stubs:
            del sys.modules[name]
    return open_clip.model, open_clip.tokenizer


MODEL, TOKENIZER = open_clip_modules()
BPE_FILE = Path(TOKENIZER.default_bpe())


def random_open_clip(context_length: int, quick_gelu: bool, seed: int = 0):
    """open_clip's CLIP at a tiny size, every weight (norms and biases too) perturbed away from its init."""
    torch.manual_seed(seed)
    model = MODEL.CLIP(EMBED, MODEL.CLIPVisionCfg(layers=LAYERS, width=WIDTH, patch_size=PATCH, image_size=IMAGE),
                       MODEL.CLIPTextCfg(context_length=context_length, vocab_size=VOCAB, width=WIDTH,
                                         heads=WIDTH // 64, layers=LAYERS), quick_gelu=quick_gelu)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.02 * torch.randn_like(param))
    return model.eval()


def token_ids(lengths, context_length: int, seed: int = 0) -> torch.Tensor:
    """Texts of `lengths` tokens (start, random BPE ids, end), padded with zeros as OpenAI's tokenizers pad."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), context_length, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, 1:length - 1] = torch.randint(0, VOCAB - 2, (length - 2,), generator=generator)
        ids[row, 0], ids[row, length - 1] = VOCAB - 2, VOCAB - 1
    return ids


def images(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))


def ours(model, ids, pixels):
    """(text features, image features, logits per image) of a converted transformers model."""
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=pixels, attention_mask=(ids != 0).long())
        text = model.get_text_features(input_ids=ids, attention_mask=(ids != 0).long()).pooler_output
        image = model.get_image_features(pixel_values=pixels).pooler_output
    return text, image, out.logits_per_image


def reference(encode_text, encode_image, logit_scale, ids, pixels):
    with torch.no_grad():
        text, image = encode_text(ids), encode_image(pixels)
        logits = logit_scale.exp() * torch.nn.functional.normalize(image, dim=-1) @ \
            torch.nn.functional.normalize(text, dim=-1).T
    return text, image, logits


def max_differences(expected, actual, lengths) -> dict:
    text, image, logits = ((a - b).abs() for a, b in zip(expected, actual))
    found = {f"text_{length}": text[row].max().item() for row, length in enumerate(lengths)}
    return {**found, "images": image.max().item(), "logits": logits.max().item()}


def released_longclip_text(model, positional_embedding, positional_embedding_res, text):
    """Long-CLIP's `CLIP.encode_text` as released (github.com/beichenzbc/Long-CLIP, model/model_longclip.py at
    commit 4e6f5dab40404df13749f5982d517dbecfc67e52): the token embedding plus `positional_embedding * mask1 +
    positional_embedding_res * mask2` (mask1 ones on rows 0-19, mask2 on rows 20-247), OpenAI's causal transformer
    over 248 positions, `ln_final`, the state at `text.argmax(dim=-1)` times `text_projection`. The transformer
    blocks and norms are open_clip's modules holding the same weights."""
    mask1 = torch.zeros([248, 1])
    mask1[:20, :] = 1
    mask2 = torch.zeros([248, 1])
    mask2[20:, :] = 1
    x = model.token_embedding(text)
    x = x + positional_embedding * mask1 + positional_embedding_res * mask2
    x = model.transformer(x, attn_mask=model.attn_mask)
    x = model.ln_final(x)
    return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ model.text_projection


# ------------------------------------------------------------------------------------------------------ parity

def test_openai_torchscript_archive_matches_open_clip(tmp_path):
    """OpenAI's release: a traced TorchScript archive in float16, read without running its code; the reference is
    open_clip's `build_model_from_openai_state_dict` over `torch.jit.load(...).state_dict()` (what open_clip's
    `load_openai_model` does)."""
    source = random_open_clip(77, quick_gelu=True)
    MODEL.convert_weights_to_fp16(source)
    archive = tmp_path / "ViT-tiny.pt"
    example = (torch.ones(2, 3, IMAGE, IMAGE, dtype=torch.float16), torch.zeros(2, 77, dtype=torch.long))
    traced = torch.jit.trace_module(source, {"forward": example, "encode_text": example[1:],
                                             "encode_image": example[:1]}, check_trace=False)
    torch.jit.save(traced, str(archive))
    state = {k: v for k, v in torch.jit.load(str(archive)).state_dict().items() if k != "attn_mask"}  # a buffer
    reference_model = MODEL.build_model_from_openai_state_dict(state).float()
    model, processor = convert_checkpoint("openai", archive)
    assert processor is None and type(model).__name__ == "CLIPModel"
    assert model.config.text_config.hidden_act == "quick_gelu"
    lengths, ids, pixels = (10, 77), token_ids((10, 77), 77), images()
    diffs = max_differences(reference(reference_model.encode_text, reference_model.encode_image,
                                      reference_model.logit_scale, ids, pixels), ours(model, ids, pixels), lengths)
    assert max(diffs.values()) < TOLERANCE, diffs


def test_open_clip_training_checkpoint_matches_open_clip(tmp_path):
    """An open_clip training checkpoint (`epoch`, `name`, `state_dict` with DDP's `module.` prefixes, the optimizer
    state), GELU, in float32."""
    source = random_open_clip(77, quick_gelu=False, seed=1)
    path = tmp_path / "epoch_1.pt"
    torch.save({"epoch": 1, "name": "tiny", "state_dict": {f"module.{k}": v for k, v in source.state_dict().items()},
                "optimizer": torch.optim.AdamW(source.parameters()).state_dict()}, path)
    model, _ = convert_checkpoint("open_clip", path)
    assert model.config.vision_config.hidden_act == "gelu"
    lengths, ids, pixels = (10, 77), token_ids((10, 77), 77), images()
    diffs = max_differences(reference(source.encode_text, source.encode_image, source.logit_scale, ids, pixels),
                            ours(model, ids, pixels), lengths)
    assert max(diffs.values()) < TOLERANCE, diffs


def longclip_release(tmp_path, seed: int = 2):
    """(path, open_clip model, positional_embedding, positional_embedding_res): a random Long-CLIP / HiMo-CLIP
    release, saved as a float16 state dict with two different 248-row tables."""
    source = random_open_clip(248, quick_gelu=True, seed=seed)
    state = {name: value.half() for name, value in source.state_dict().items()}
    state["positional_embedding_res"] = (state["positional_embedding"].float()
                                         + 0.05 * torch.randn(248, WIDTH)).half()
    path = tmp_path / "longclip-tiny.pt"
    torch.save(state, path)
    source.load_state_dict({k: v for k, v in state.items() if k != "positional_embedding_res"})  # fp16 values
    return path, source, state["positional_embedding"].float(), state["positional_embedding_res"].float()


@pytest.mark.parametrize("format", ["longclip", "himo"])
def test_longclip_release_matches_released_forward(tmp_path, format):
    path, source, table, table_res = longclip_release(tmp_path)
    model, _ = convert_checkpoint(format, path)
    assert isinstance(model, HiMoCLIPModel) and model.config.frozen_position_rows == 20
    lengths = (10, 100, 240)
    ids, pixels = token_ids(lengths, 248), images()
    expected = reference(lambda text: released_longclip_text(source, table, table_res, text), source.encode_image,
                         source.logit_scale, ids, pixels)
    diffs = max_differences(expected, ours(model, ids, pixels), lengths)
    assert max(diffs.values()) < TOLERANCE, diffs


def test_torchscript_reader_refuses_other_globals(tmp_path):
    """A torch.save pickle that needs more than weights is refused (weights_only), with the reason."""
    path = tmp_path / "object.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "args": types.SimpleNamespace(lr=1)}, path)
    with pytest.raises(ValueError, match="not a plain weights file"):
        load_original_checkpoint(path)


def test_converter_refuses_foreign_weights(tmp_path):
    source = random_open_clip(77, quick_gelu=True)
    state = {**source.state_dict(), "visual.extra_head.weight": torch.zeros(2, 2)}
    path = tmp_path / "extra.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="visual.extra_head.weight"):
        convert_checkpoint("openai", path)
    with pytest.raises(ValueError, match="positional_embedding_res"):
        convert_checkpoint("longclip", path)


# --------------------------------------------------------------------------------------------------- tokenizer

LONG_CAPTION = (
    "The image shows a bustling street market at dusk. Vendors' stalls line both sides of a narrow lane, their "
    "awnings striped red-and-white; strings of warm bulbs hang overhead. In the foreground, a woman in a "
    "teal headscarf weighs 2.5 kg of oranges on a brass scale while a boy (maybe 8 or 9 years old) points at "
    "a pyramid of pomegranates. Further back, a cyclist weaves between shoppers, a dog naps under a cart, and "
    "a hand-painted sign reads \"FRESH FISH - 10% OFF!\". The café on the right has three small tables; "
    "two elderly men play backgammon at one of them. "
)


@pytest.mark.parametrize("text", ["a dog.", LONG_CAPTION, LONG_CAPTION * 3, "  Mixed   CASE, digits 12345 "
                                  "and punctuation?! It's fine: naïve café... #tags @people"])
def test_tokenizer_from_bpe_file_matches_open_clip(text):
    """`clip_tokenizer(bpe_file=...)` in our processor gives exactly the ids of open_clip's `SimpleTokenizer` with a
    248-token context (= Long-CLIP's `tokenize(..., truncate=True)`): zero padding, end token kept last."""
    from hf_longclip import HiMoCLIPProcessor
    from hf_longclip.models.convert_clip import clip_image_processor

    processor = HiMoCLIPProcessor(clip_image_processor(IMAGE), clip_tokenizer(bpe_file=BPE_FILE), max_length=248)
    expected = TOKENIZER.SimpleTokenizer(context_length=248)([text])
    assert torch.equal(processor(text=[text], padding="max_length")["input_ids"], expected.long())
    longest = processor(text=[text])["input_ids"]  # the default: no padding past the longest text
    assert torch.equal(longest, expected.long()[:, :longest.shape[1]]) and (expected[:, longest.shape[1]:] == 0).all()


def test_truncated_caption_keeps_end_token():
    processor_ids = clip_tokenizer(bpe_file=BPE_FILE)(LONG_CAPTION * 3, truncation=True, max_length=248)["input_ids"]
    assert len(processor_ids) == 248 and processor_ids[-1] == VOCAB - 1 and processor_ids[0] == VOCAB - 2


# ---------------------------------------------------------------------------------------- frozen position rows

class ReleasedPositionTables(torch.nn.Module):
    """Long-CLIP's text positions as its `load_from_clip` sets them up for training (model/longclip.py of
    github.com/beichenzbc/Long-CLIP): the stretched table twice, `positional_embedding` with requires_grad=False
    and `positional_embedding_res` trained, read through mask1 (rows 0-19) and mask2 (rows 20-247)."""

    def __init__(self, stretched: torch.Tensor):
        super().__init__()
        self.positional_embedding = torch.nn.Parameter(stretched.clone(), requires_grad=False)
        self.positional_embedding_res = torch.nn.Parameter(stretched.clone(), requires_grad=True)
        self.register_buffer("mask1", torch.zeros(248, 1))
        self.mask1[:20] = 1
        self.register_buffer("mask2", 1 - self.mask1)

    @property
    def weight(self) -> torch.Tensor:  # what CLIPTextEmbeddings reads (its length, to check the input's)
        return self.positional_embedding * self.mask1 + self.positional_embedding_res * self.mask2

    def forward(self, position_ids):
        return self.weight[position_ids]


def test_frozen_position_rows_follow_the_official_update(accelerator):
    """One AdamW step (lr 1e-3, weight decay 0.01, the loop's parameter groups) of a stretched HiMo-CLIP equals
    the official update computed by hand: Long-CLIP's `load_from_clip` keeps `positional_embedding`
    (requires_grad=False) and trains `positional_embedding_res`, the forward reading rows 0-19 of the first and
    20-247 of the second. So rows 0-19 stay exactly; rows 20-247 take Adam's first step, p - lr * wd * p -
    lr * g / (|g| + eps), with g the gradient of the loss with respect to those rows."""
    lr, wd, eps = 1e-3, 0.01, 1e-8
    model = HiMoCLIPModel.from_clip(tiny_clip())
    assert model.config.frozen_position_rows == 20
    table = model.text_model.embeddings.position_embedding.weight
    before = table.detach().clone()
    ids = torch.randint(2, 80, (4, 248))
    ids[:, 0], ids[:, -1] = 0, 1
    pixels = images(4)

    def loss_of(m):
        return m(input_ids=ids, pixel_values=pixels, return_loss=True).loss

    # the official gradient: the same loss through the two-table forward, rows 20+ from the trained table
    official = HiMoCLIPModel.from_clip(tiny_clip())
    official.text_model.embeddings.position_embedding = ReleasedPositionTables(before)
    trained = official.text_model.embeddings.position_embedding.positional_embedding_res
    loss_of(official).backward()
    gradient = trained.grad[20:]
    expected = before.clone()
    expected[20:] = before[20:] - lr * wd * before[20:] - lr * gradient / (gradient.abs() + eps)

    task = HiMoCLIPTask(model, None, molo_lambda=0.0)
    optimizer = torch.optim.AdamW(parameter_groups(model, wd), lr=lr, eps=eps)
    model.train()
    loss_of(model).backward()
    assert table.grad[:20].abs().max() == 0 and table.grad[20:].abs().max() > 0
    optimizer.step()
    task.after_optimizer_step(model, accelerator)
    assert torch.equal(table[:20], before[:20])
    # each side rounds at most 4 times at the table's magnitude (decay factor, product, two subtractions; the
    # lr-sized step rounds far below it): 8 eps of the table
    torch.testing.assert_close(table.detach(), expected, rtol=0, atol=rounding_atol(before, 8))


def test_config_default_trains_every_row():
    model = HiMoCLIPModel.from_clip(tiny_clip(), stretch_positions=False)
    assert model.config.frozen_position_rows == 0


# ------------------------------------------------------------------------------------------------ command line

def test_convert_command_text_encoder_only(tmp_path):
    """`--text-encoder-only` writes a plain transformers CLIPTextModel with all 248 positions, equal to the
    converted model's text tower, and the tokenizer beside it reading 248 tokens."""
    from transformers import CLIPTextModel, CLIPTokenizer

    path, *_ = longclip_release(tmp_path)
    main(["convert", "longclip", str(path), str(tmp_path / "text"), "--bpe-file", str(BPE_FILE),
          "--text-encoder-only"])
    encoder = CLIPTextModel.from_pretrained(tmp_path / "text")
    tokenizer = CLIPTokenizer.from_pretrained(tmp_path / "text")
    assert type(encoder) is CLIPTextModel and encoder.config.max_position_embeddings == 248
    assert tokenizer.model_max_length == 248
    model, _ = convert_checkpoint("longclip", path)
    ids = token_ids((240,), 248)
    with torch.no_grad():
        torch.testing.assert_close(encoder(input_ids=ids).last_hidden_state,
                                   model.text_model(input_ids=ids).last_hidden_state, rtol=0, atol=0)


@pytest.mark.slow
def test_converted_checkpoint_loads_without_the_library(tmp_path):
    """`hf-longclip convert himo ... --bpe-file` output loads with AutoModel / AutoProcessor in a fresh offline
    process where hf_longclip is not importable, tokenizes like open_clip and gives the converted features."""
    path, source, table, table_res = longclip_release(tmp_path)
    output = tmp_path / "converted"
    main(["convert", "himo", str(path), str(output), "--bpe-file", str(BPE_FILE)])
    loaded = run_converted_offline(output, tmp_path, f"""
inputs = processor(text=[{LONG_CAPTION * 3!r}], return_tensors="pt")
result.update(ids=inputs["input_ids"][0].tolist(), features=model.get_text_features(**inputs).pooler_output[0].tolist(),
              frozen=model.config.frozen_position_rows)
""")
    ids = TOKENIZER.SimpleTokenizer(context_length=248)([LONG_CAPTION * 3]).long()
    assert loaded["ids"] == ids[0].tolist() and loaded["frozen"] == 20
    with torch.no_grad():
        expected = released_longclip_text(source, table, table_res, ids)[0]
    assert (torch.tensor(loaded["features"]) - expected).abs().max() < TOLERANCE
    assert json.loads((output / "config.json").read_text())["model_type"] == "himo_clip"


@pytest.mark.slow
def test_push_to_hub_with_a_model_card(tmp_path):
    """`--push-to-hub` uploads the converted checkpoint (to the loopback fake Hub of tests/helpers/fake_hub.py) with a
    card naming the source's license and paper, the verified tolerance and the paper's results as reported."""
    import subprocess

    from helpers.fake_hub import FakeHub
    from helpers.hub import TOKEN, hub_env

    path, *_ = longclip_release(tmp_path)
    with FakeHub(token=TOKEN) as hub:
        proc = subprocess.run([sys.executable, "-m", "hf_longclip.cli", "convert", "longclip", str(path),
                               str(tmp_path / "out"), "--bpe-file", str(BPE_FILE),
                               "--push-to-hub", "org/longclip-tiny"],
                              env=hub_env(hub, tmp_path / "home"), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        card = hub.file("org/longclip-tiny", "README.md").decode()
        assert hub.file("org/longclip-tiny", "config.json")
    assert "license: apache-2.0" in card and "arXiv:2403.15378" in card and "within 1e-4" in card
    assert "As reported by the authors, not measured on this conversion" in card
    assert "| Urban1k | I2T R@1 | ViT-L/14 | 82.7 | HiMo-CLIP paper, Table 1 |" in card
    assert "model-index" not in card  # a tiny tower is none of the released models: no figures in its metadata


@pytest.mark.parametrize("format, license, paper, checked, reported", [
    ("tulip", "apache-2.0", "arXiv:2410.10034", "260 tokens", "| Urban1k | T2I R@1 | ViT-B/16 | 86.6 |"),
    ("flair", "unknown", "arXiv:2412.03561", "77 tokens", "| DOCCI | I2T R@1 | flair-merged30m | 70.3 |"),
    ("cast", "mit", "arXiv:2210.00314", "on images", None),
])
def test_model_card_of_tulip_flair_cast(format, license, paper, checked, reported):
    """Each card names the source's license and paper, the parity verified (tolerance, inputs, test file) and the
    paper's results only as reported; CAST's paper is not here, so its card quotes no results."""
    card = str(conversion_card(format, f"org/{format}-tiny"))
    assert f"license: {license}" in card and paper in card and "within 1e-4" in card and checked in card
    assert f"tests/conversion/test_convert_{'cast' if format == 'cast' else 'tulip_flair'}.py" in card
    if reported:
        assert "As reported by the authors, not measured on this conversion" in card and reported in card
    else:
        assert "reported" not in card.lower()


def _vision_tower(width: int, patch: int, image: int = 224):
    """A stand-in for a converted model: what `released_model_names` reads of it."""
    from types import SimpleNamespace

    return SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(hidden_size=width, patch_size=patch,
                                                                                image_size=image)))


@pytest.mark.parametrize("format, model, checkpoint, expected, absent", [
    ("longclip", _vision_tower(1024, 14), "longclip-L.pt", {("Urban1k", 82.7), ("Urban1k", 86.1),
                                                            ("HiMo-Docci", -0.55)}, ("Urban1k", 78.9)),
    ("himo", _vision_tower(1024, 14), "himo-clip_L.pt", {("COCO", 65.1), ("HiMo-Docci", 0.88)}, ("COCO", 60.6)),
    ("tulip", _vision_tower(768, 16), "epoch_1.pt", {("ShareGPT4V-1k", 98.6), ("DOCCI", 75.8)}, ("Urban1k", 90.1)),
    ("flair", None, "flair-cc3m-recap.pt", {("COCO", 51.6), ("COCO", 37.7), ("Flickr30k", 78.7)}, ("COCO", 68.0)),
])
def test_card_metadata_carries_the_reported_figures_of_that_released_model(format, model, checkpoint, expected,
                                                                            absent):
    """The model-index of a converted checkpoint's card holds the figures the authors report for that released
    model (found by its vision backbone or the checkpoint's file name), marked as reported and unverified, and no
    other model's; a text tower alone carries none."""
    from huggingface_hub import ModelCard

    card = ModelCard(str(conversion_card(format, f"org/{format}", model=model, checkpoint=checkpoint)))
    results = {(result.dataset_name, result.metric_value) for result in card.data.eval_results}
    assert expected <= results and absent not in results
    assert all(not result.verified and "as reported" in result.metric_name for result in card.data.eval_results)
    assert card.data.eval_results[0].task_type == "image-text-retrieval" and card.data.model_name == format
    text_only = ModelCard(str(conversion_card(format, f"org/{format}", True, model=model, checkpoint=checkpoint)))
    assert text_only.data.eval_results is None


@pytest.mark.parametrize("format", ["longclip", "himo", "tulip", "flair"])
def test_converting_docs_give_every_reported_figure(format):
    """docs/converting.md shows each figure a converter's card reports, with the command that evaluates it."""
    from hf_longclip.models.conversion import source_info

    docs = (Path(__file__).resolve().parents[2] / "docs" / "converting.md").read_text()
    section = docs[docs.index("## Reproduction recipes"):]
    for result in source_info(format).reported:
        assert f"{result.value:g}" in section, (format, result)
