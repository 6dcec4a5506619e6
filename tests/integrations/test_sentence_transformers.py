"""Every dual encoder saved with `save_sentence_transformer` loads with `SentenceTransformer(path,
trust_remote_code=True)`, whose `encode` returns the model's own normalised text and image embeddings, long captions
read to the model's length (not CLIP's 77)."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from helpers.builders import CAPTIONS, random_images, tiny_himo, tiny_processor
from helpers.diffusion import FIRST_DIFFERENCE, LATE_CHANGE, PROMPT
from helpers.fcast import CAPTIONS as SCENE_CAPTIONS
from helpers.tiny_models import TEXT_MODELS, tiny_model
from hf_longclip.integrations.sentence_transformers import save_sentence_transformer
from hf_longclip.models.fcast.processing_fcast import ChunkTruncationWarning

sentence_transformers = pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402


def build(name: str):
    """(model, processor, long captions) of one dual encoder."""
    model, processor = tiny_model(name, seed=1)
    return model, processor, SCENE_CAPTIONS if name == "fcast" else [PROMPT, LATE_CHANGE, *CAPTIONS]


@pytest.mark.parametrize("name", TEXT_MODELS)
def test_sentence_transformer_encodes_as_the_model(name, tmp_path):
    model, processor, captions = build(name)
    save_sentence_transformer(model, processor, tmp_path)
    encoder = SentenceTransformer(str(tmp_path), trust_remote_code=True, device="cpu")
    images = random_images(3)
    texts = encoder.encode(captions, convert_to_tensor=True)
    pictures = encoder.encode(images, convert_to_tensor=True)
    with torch.no_grad():
        expected_texts = model.get_text_features(**processor(text=captions, padding="longest")).pooler_output
        expected_images = model.get_image_features(**processor(images=images)).pooler_output
    assert torch.allclose(texts, F.normalize(expected_texts, dim=-1), atol=1e-6)
    assert torch.allclose(pictures, F.normalize(expected_images, dim=-1), atol=1e-6)
    assert torch.allclose(texts.norm(dim=-1), torch.ones(len(captions)))
    if name != "fcast":  # the two prompts differ only after token 100: read whole, they embed apart
        assert (processor(text=[PROMPT])["input_ids"] != processor.tokenizer.eos_token_id).sum() > FIRST_DIFFERENCE
        assert not torch.allclose(texts[0], texts[1], atol=1e-4)


def too_long(name: str) -> str:
    """A caption past the model's length: 488 tokens for the 248-token models; for F-CAST (4 chunks of 16 tokens)
    426 tokens, each scene caption four times over, so that each chunk holds one of them, cut."""
    if name == "fcast":
        return " ".join(caption for caption in SCENE_CAPTIONS for _ in range(4))
    return " ".join([PROMPT, LATE_CHANGE, PROMPT, LATE_CHANGE])


@pytest.mark.parametrize("name", TEXT_MODELS)
def test_texts_longer_than_the_model_are_cut_at_its_length_keeping_the_end_of_text_token(name, tmp_path):
    """`encode` of a 400+ token caption is the model's embedding of its processor's truncated input, which is cut at
    the model's length (per chunk for F-CAST), not at 77, and whose rows end with the end-of-text token."""
    model, processor, _ = build(name)
    save_sentence_transformer(model, processor, tmp_path)
    encoder = SentenceTransformer(str(tmp_path), trust_remote_code=True, device="cpu")
    caption = too_long(name)
    assert len(processor.tokenizer(caption, verbose=False)["input_ids"]) > 400

    def truncating():  # F-CAST's processor says that the caption does not fit its chunks
        return pytest.warns(ChunkTruncationWarning) if name == "fcast" else contextlib.nullcontext()

    with truncating():
        inputs = processor(text=[caption])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    length = model.config.text_config.max_position_embeddings
    assert ids.shape == ((1, 4, length) if name == "fcast" else (1, length)) and length != 77
    assert (mask.sum(-1) == length).all()  # every row (F-CAST: every chunk) is full: cut
    last = ids.gather(-1, mask.sum(-1, keepdim=True) - 1)
    assert (last == processor.tokenizer.eos_token_id).all()
    with torch.no_grad():
        expected = F.normalize(model.get_text_features(**inputs).pooler_output, dim=-1)
    with truncating():
        embedding = encoder.encode([caption], convert_to_tensor=True)
    assert torch.allclose(embedding, expected, atol=1e-6)


def test_a_model_without_both_towers_or_a_processor_cutting_at_77_is_refused(tmp_path):
    with pytest.raises(TypeError, match="not a dual encoder"):
        save_sentence_transformer(tiny_himo().vision_model, tiny_processor(), tmp_path)
    with pytest.raises(ValueError, match="cuts texts at 77 tokens, the model reads 248"):
        save_sentence_transformer(tiny_himo(), tiny_processor(max_length=77), tmp_path)
    assert not any(tmp_path.iterdir())


FRESH_PROCESS = """
import json, sys
sys.modules["hf_longclip"] = None  # the library is not importable: only the checkpoint's own code may run
from sentence_transformers import SentenceTransformer
path, caption = sys.argv[1], sys.argv[2]
try:
    SentenceTransformer(path, device="cpu")
    refused = False
except ValueError as error:
    refused = "trust_remote_code" in str(error)
encoder = SentenceTransformer(path, trust_remote_code=True, device="cpu")
print(json.dumps({"refused": refused, "embedding": encoder.encode([caption])[0].tolist()}))
"""


@pytest.mark.slow
def test_loads_where_the_library_is_not_installed_only_with_trust_remote_code(tmp_path):
    import json
    import os
    import subprocess
    import sys

    model, processor, _ = build("onelip")  # the RoPE text model: nothing of it is in transformers
    save_sentence_transformer(model, processor, tmp_path / "checkpoint")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "home"), PYTHONPATH="")
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(tmp_path / "checkpoint"), PROMPT], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert output["refused"]
    with torch.no_grad():
        expected = F.normalize(model.get_text_features(**processor(text=[PROMPT])).pooler_output, dim=-1)[0]
    assert torch.allclose(torch.tensor(output["embedding"]), expected, atol=1e-6)
