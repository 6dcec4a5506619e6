"""Bad inputs get a clear error, not an obscure traceback or a silent wrong result (issue 31, point 8): raw uint8 or
empty pixel batches, bool superpixels, token ids outside the vocabulary, `text=[]`, a 0x0 image, F-CAST's losses
with unequal image and caption counts, a truncated negative-bank file, a queue file deleted mid-run, and OpenCV
without its contrib modules. NaN is refused by the processors; a model given NaN pixels directly gives NaN (a check
in `forward` would cost a host synchronisation every step)."""

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from helpers.builders import random_images, tiny_clip, tiny_himo, tiny_processor
from helpers.ditm import tiny_ditm
from helpers.fcast import tiny_fcast, training_inputs
from helpers.fcast import tiny_processor as fcast_processor
from hf_longclip import CASTImageProcessor, OneLIPModel
from hf_longclip.models.cast.image_processing_cast import compute_superpixels
from hf_longclip.objectives.fcast import FCASTLoss, FLAIRLoss
from hf_longclip.recipes.onelip.hard_negatives import QUEUE_FILE, QueueStore
from hf_longclip.recipes.onelip.negative_bank import NegativeBank


@pytest.fixture(scope="module")
def himo_batch():
    return dict(tiny_processor()(text=["a b c", "d e f"], images=random_images(2)))


@pytest.fixture(scope="module")
def fcast():
    return tiny_fcast().eval(), training_inputs()


@pytest.fixture(scope="module", params=["himo", "ditm", "onelip"])
def clip_like(request):
    return {"himo": tiny_himo, "ditm": tiny_ditm, "onelip": lambda: OneLIPModel.from_clip(tiny_clip())}[
        request.param]().eval()


def test_raw_or_empty_pixels_and_out_of_vocabulary_ids_are_named(clip_like, himo_batch):
    pixels, ids = himo_batch["pixel_values"], himo_batch["input_ids"]
    with pytest.raises(TypeError, match=r"pixel_values must be floating point.*got torch.uint8"):
        clip_like.get_image_features(pixel_values=(pixels * 60).clamp(0, 255).to(torch.uint8))
    with pytest.raises(ValueError, match=r"pixel_values is empty \(shape \(0, 3, 32, 32\)\)"):
        clip_like.get_image_features(pixel_values=pixels[:0])
    vocab = clip_like.config.text_config.vocab_size
    with pytest.raises(ValueError, match=rf"token ids must lie in the vocabulary \[0, {vocab}\).*got id {vocab}\)"):
        clip_like.get_text_features(input_ids=ids.masked_fill(ids == ids[0, 1], vocab))
    with pytest.raises(ValueError, match=r"input_ids is empty"):
        clip_like.get_text_features(input_ids=ids[:0])
    with pytest.raises(TypeError, match="integer token ids"):
        clip_like.get_text_features(input_ids=ids.float())


def test_nan_is_refused_by_the_processor_and_propagates_through_the_model(himo_batch):
    with pytest.raises(ValueError, match="image 1 .* holds NaN"):
        tiny_processor()(images=[np.zeros((8, 8, 3), np.float32), np.full((8, 8, 3), np.nan, np.float32)])
    outputs = tiny_himo().eval()(**{**himo_batch, "pixel_values": torch.full_like(himo_batch["pixel_values"],
                                                                                  float("nan"))})
    assert outputs.logits_per_image.isnan().all()  # documented: no check (and no host sync) in forward


def test_fcast_refuses_bool_superpixels_uint8_pixels_and_unknown_ids(fcast):
    model, inputs = fcast
    with pytest.raises(ValueError, match="superpixels must hold integer segment ids, got torch.bool"):
        model.get_image_features(inputs["pixel_values"], inputs["superpixels"].bool())
    with pytest.raises(TypeError, match="pixel_values must be floating point"):
        model.get_image_features((inputs["pixel_values"] * 50).clamp(0, 255).byte(), inputs["superpixels"])
    with pytest.raises(ValueError, match="token ids must lie in the vocabulary"):
        model.get_text_features(inputs["input_ids"] + model.config.text_config.vocab_size)


@pytest.mark.parametrize("loss", [FCASTLoss(), FLAIRLoss()], ids=["fcast", "flair"])
def test_fcast_losses_refuse_unequal_image_and_caption_counts(loss):
    images, subs = torch.randn(4, 8), torch.randn(3, 6, 8)
    arguments = ((images, images[:3], subs, None, None, None, 1.0, 0.0, 1.0, 0.0) if isinstance(loss, FCASTLoss)
                 else (images, subs, None, None, None, None, 1.0, 0.0))
    with pytest.raises(ValueError, match="pairs image i with the sub-captions of caption i: got 4 images and 3"):
        loss(*arguments)


def test_processors_refuse_an_empty_text_list_and_a_0x0_image():
    for processor in (tiny_processor(), fcast_processor()):
        with pytest.raises(ValueError, match="(text is an empty list|pass at least one caption)"):
            processor(text=[])
        with pytest.raises(ValueError, match=r"image 0 \(a PIL image of mode 'RGB' and size \(0, 0\)\).*no pixel"):
            processor(images=Image.new("RGB", (0, 0)))


def test_a_truncated_negative_bank_file_is_named(tmp_path):
    NegativeBank.allocate(tmp_path, np.array([0, 2, 4], dtype=np.int64), 8)
    NegativeBank.seal(tmp_path, "fingerprint", "digest")
    assert NegativeBank(tmp_path).captions.shape == (4, 8)
    (tmp_path / "captions.f16").write_bytes((tmp_path / "captions.f16").read_bytes()[:10])
    with pytest.raises(ValueError, match=r"captions.f16 is 10 bytes, but bank.json says it holds \(4, 8\) float16 "
                                         r"\(64 bytes\): the bank is damaged"):
        NegativeBank(tmp_path)


def test_queues_are_saved_and_restored_even_after_their_file_is_deleted(tmp_path):
    store = QueueStore(tmp_path / "live", num_samples=4, queue_size=3)
    store.write(np.array([1, 3]), np.array([[5, 6, 7], [8, 9, 10]]), np.full((2, 3), 0.5), step=3)
    (tmp_path / "live" / QUEUE_FILE).unlink()  # mid-run
    store.save(tmp_path / "checkpoint")
    store.write(np.array([1]), np.array([[0, 0, 0]]), np.zeros((1, 3)), step=4)
    store.load(tmp_path / "checkpoint")  # back to the checkpoint, in the live (deleted) file
    indices, difficulties, refreshed = store.read(np.array([1, 3]))
    assert indices.tolist() == [[5, 6, 7], [8, 9, 10]] and refreshed.tolist() == [3, 3]
    fresh = QueueStore(tmp_path / "resumed", num_samples=4, queue_size=3)
    fresh.load(tmp_path / "checkpoint")
    assert fresh.read(np.array([3]))[0].tolist() == [[8, 9, 10]]


def test_opencv_without_contrib_modules_names_the_package_to_install(monkeypatch):
    monkeypatch.delattr(cv2, "ximgproc")  # what plain opencv-python lacks
    processor = CASTImageProcessor(size=32, num_segments=16)  # constructing needs no OpenCV: computing SEEDS does
    with pytest.raises(ImportError, match="pip install opencv-contrib-python-headless"):
        processor(images=Image.new("RGB", (40, 40), "red"))
    with pytest.raises(ImportError, match="cv2.ximgproc"):
        compute_superpixels(np.zeros((16, 16, 3), np.uint8), 4)
    assert CASTImageProcessor(size=32, num_segments=16, superpixel_method="slic")(
        images=Image.new("RGB", (40, 40), "red"))["superpixels"].shape == (1, 32, 32)
