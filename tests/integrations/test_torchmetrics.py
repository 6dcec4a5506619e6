"""torchmetrics' CLIP Score, the released package (the `CLIPScore` metric and the functional `clip_score`), with a
HiMo-CLIP exported as a plain transformers CLIP folder (`hf-longclip export-clip`) and loaded through
`hf_longclip.integrations.torchmetrics.clip_score_model`: captions past 77 tokens are scored whole up to 248, longer
ones cut at 248 with the end-of-text token kept, and every score is max(100 cos, 0) of HiMo-CLIP's own features."""

import pytest
import torch
import torch.nn.functional as F

from helpers.builders import CAPTIONS, tiny_himo, tiny_processor
from helpers.diffusion import FIRST_DIFFERENCE, LATE_CHANGE, PROMPT
from helpers.numerics import rounding_atol, transformer_roundings
from hf_longclip.cli import main
from hf_longclip.integrations.torchmetrics import CLIPScoreFeatures, clip_score_model

torchmetrics = pytest.importorskip("torchmetrics")
from torchmetrics.functional.multimodal import clip_score  # noqa: E402
from torchmetrics.multimodal.clip_score import CLIPScore  # noqa: E402

LONG = 248
CAPTIONS_LONG = [PROMPT, LATE_CHANGE, *CAPTIONS]  # 124 and 123 tokens, then four short ones
TOO_LONG = " ".join([PROMPT, LATE_CHANGE, PROMPT, LATE_CHANGE])  # 488 tokens
# past token 248 only: the same caption for a model that reads 248 tokens
TOO_LONG_OTHER_TAIL = " ".join([PROMPT, LATE_CHANGE, LATE_CHANGE, PROMPT])
OTHER_TOO_LONG = " ".join(CAPTIONS[::-1] * 3)  # 566 tokens, another text from the first word
# torchmetrics pads each call's captions to their longest, the reference pads all of them together: the two paths may
# reduce in other orders, by a 2-layer transformer's roundings and 4 more (normalising, the cosine), at the scale 100
ATOL = rounding_atol(torch.tensor(100.0), transformer_roundings(2) + 4)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(HiMo-CLIP, its processor, the plain CLIP folder `hf-longclip export-clip` wrote of it). Seed 3 gives image-text
    cosines of both signs on `images()`, so that CLIP Score's clamp at 0 is exercised both ways."""
    model, processor = tiny_himo(seed=3), tiny_processor()
    root = tmp_path_factory.mktemp("torchmetrics")
    model.save_pretrained(root / "himo")
    processor.save_pretrained(root / "himo")
    main(["export-clip", str(root / "himo"), str(root / "clip")])
    return model, processor, root / "clip"


def images(n: int = len(CAPTIONS_LONG)) -> torch.Tensor:
    """uint8 images (n, 3, 40, 48), as torchmetrics takes them."""
    return torch.randint(0, 256, (n, 3, 40, 48), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def cosines(model, processor, images, captions) -> torch.Tensor:
    """100 x the cosine of each (image, caption) pair, from HiMo-CLIP's own processor and encoders."""
    with torch.no_grad():
        text = model.get_text_features(**processor(text=captions, padding="longest")).pooler_output
        image = model.get_image_features(**processor(images=list(images))).pooler_output
    return 100 * F.cosine_similarity(image, text)


def text_cosine(model, processor, first: str, second: str) -> torch.Tensor:
    with torch.no_grad():
        text = model.get_text_features(**processor(text=[first, second], padding="longest")).pooler_output
    return 100 * F.cosine_similarity(text[:1], text[1:])[0]


def test_functional_clip_score_reads_captions_past_77_tokens_whole(exported):
    model, processor, folder = exported
    loader = clip_score_model(folder)
    assert loader() is loader()  # loaded once: the functional form calls it on every call
    features, clip_processor = loader()
    assert isinstance(features, CLIPScoreFeatures) and type(features.model).__name__ == "CLIPModel"
    assert features.config.text_config.max_position_embeddings == LONG
    lengths = clip_processor(text=CAPTIONS_LONG, padding=True, return_tensors="pt")["attention_mask"].sum(-1)
    assert lengths[0] > FIRST_DIFFERENCE > 77
    pictures = images()
    expected = cosines(model, processor, pictures, CAPTIONS_LONG)
    assert (expected > 1).any() and (expected < -1).any()  # both sides of CLIP Score's clamp
    for index, caption in enumerate(CAPTIONS_LONG):
        score = clip_score(pictures[index], caption, loader)
        torch.testing.assert_close(score, expected[index].clamp(min=0), rtol=0, atol=ATOL)
    # a batch: the mean of the pairs' scores, clamped at 0 once (here negative)
    batch = clip_score(pictures, CAPTIONS_LONG, loader)
    assert expected.mean() < 0 and batch == 0
    # two captions that differ only after token 100 are two texts, not one cut at 77 (which would score 100)
    text_score = clip_score(PROMPT, LATE_CHANGE, loader)
    torch.testing.assert_close(text_score, text_cosine(model, processor, PROMPT, LATE_CHANGE), rtol=0, atol=ATOL)
    assert 0 < text_score < 99.9
    torch.testing.assert_close(clip_score(PROMPT, PROMPT, loader), torch.tensor(100.0), rtol=0, atol=ATOL)


def test_clip_score_metric_accumulates_the_mean_over_updates(exported):
    model, processor, folder = exported
    pictures = images()
    expected = cosines(model, processor, pictures, CAPTIONS_LONG)
    metric = CLIPScore(model_name_or_path=clip_score_model(folder))
    metric.update(pictures[:2], CAPTIONS_LONG[:2])
    metric.update(pictures[2:3], CAPTIONS_LONG[2:3])
    assert expected[:3].mean() > 1
    torch.testing.assert_close(metric.compute(), expected[:3].mean(), rtol=0, atol=ATOL)
    metric.update(pictures[3:], CAPTIONS_LONG[3:])  # the mean over all six pairs is negative: clamped at 0
    assert metric.compute() == 0
    metric.reset()
    metric.update([PROMPT], [LATE_CHANGE])  # text to text
    torch.testing.assert_close(metric.compute(), text_cosine(model, processor, PROMPT, LATE_CHANGE), rtol=0,
                               atol=ATOL)


def test_captions_past_the_model_length_are_cut_at_248_keeping_the_end_of_text_token(exported):
    model, processor, folder = exported
    loader = clip_score_model(folder)
    _, clip_processor = loader()
    eos = clip_processor.tokenizer.eos_token_id
    full = clip_processor(text=[TOO_LONG], truncation=False, return_tensors="pt")["input_ids"]
    ids = clip_processor(text=[TOO_LONG], padding=True, return_tensors="pt")["input_ids"]  # torchmetrics' call
    assert full.shape[1] > 400 and ids.shape == (1, LONG) and ids[0, -1] == eos
    assert torch.equal(ids, processor(text=[TOO_LONG])["input_ids"])  # as HiMo-CLIP's own processor cuts it
    picture = images(1)
    score = clip_score(picture, TOO_LONG, loader)
    assert score > 1
    torch.testing.assert_close(score, cosines(model, processor, picture, [TOO_LONG])[0].clamp(min=0), rtol=0,
                               atol=ATOL)
    torch.testing.assert_close(clip_score(TOO_LONG, TOO_LONG_OTHER_TAIL, loader), torch.tensor(100.0), rtol=0,
                               atol=ATOL)  # they differ only past token 248

    # another over-long caption, different from its first word: two texts
    ours = clip_score(TOO_LONG, OTHER_TOO_LONG, loader)
    torch.testing.assert_close(ours, text_cosine(model, processor, TOO_LONG, OTHER_TOO_LONG), rtol=0, atol=ATOL)
    assert ours < 99

    # why the processor truncates: torchmetrics 1.9.0 pads without truncating, then cuts the token rows at the model's
    # length (with a warning), dropping the end-of-text token CLIP pools at: CLIP then reads the start token, the same
    # state for every caption, and any two over-long captions score 100
    from transformers import CLIPModel, CLIPProcessor

    plain = CLIPScoreFeatures(CLIPModel.from_pretrained(folder).eval()), CLIPProcessor.from_pretrained(folder)
    with pytest.warns(UserWarning, match="longer than max_position_embeddings=248"):
        cut_without_end = clip_score(TOO_LONG, OTHER_TOO_LONG, lambda: plain)
    torch.testing.assert_close(cut_without_end, torch.tensor(100.0), rtol=0, atol=ATOL)


def test_a_folder_that_is_not_a_plain_clip_is_refused(exported, tmp_path):
    model, processor, _ = exported
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a plain CLIP.*export-clip"):
        clip_score_model(tmp_path)()
