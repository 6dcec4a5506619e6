"""`hf-longclip demo` as a user meets it: the app launched in a subprocess on 127.0.0.1 and queried with
gradio_client. The ranking must be the one computed here directly from get_text_features / get_image_features; a bad
folder, an empty caption and an image PIL cannot read must come back as messages, not errors."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import AutoModel, AutoProcessor

from helpers.demo import CAPTION, image_paths, write_demo_files
from helpers.launch import free_port

pytest.importorskip("gradio", reason='the demo needs gradio: pip install "hf-longclip[demo]"')
gradio_client = pytest.importorskip("gradio_client")

pytestmark = pytest.mark.slow
TOP_K = 5


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(client, files) of an app serving the tiny HiMo-CLIP and F-CAST over the demo folder."""
    root = tmp_path_factory.mktemp("served")
    files = write_demo_files(root)
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    log = open(root / "demo.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "hf_longclip_cli", "demo", "--model", str(files["himo"]), "--model",
         str(files["fcast"]), "--images", str(files["images"]), "--trust-remote-code", "--port", str(port),
         "--cache-dir", str(root / "cache")], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, client = time.monotonic() + 300, None
        while client is None:
            assert process.poll() is None, (root / "demo.log").read_text()
            assert time.monotonic() < deadline, "the demo did not answer within 300 s"
            try:
                client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
            except Exception:  # not listening yet
                time.sleep(1)
        yield client, files, root / "demo.log"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


@torch.no_grad()
def direct_ranking(checkpoint, caption: str, folder) -> list[str]:
    """Image file names by cosine similarity with `caption`, from the model's own get_*_features."""
    model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(checkpoint, trust_remote_code=True)
    paths = image_paths(folder)
    text = model.get_text_features(**processor(text=[caption])).pooler_output
    pixels = processor(images=[Image.open(path).convert("RGB") for path in paths])
    images = model.get_image_features(**pixels).pooler_output
    scores = (F.normalize(text, dim=-1) @ F.normalize(images, dim=-1).T)[0]
    return [paths[i].name for i in scores.argsort(descending=True).tolist()], scores.sort(descending=True).values


def gallery_names_and_scores(gallery) -> tuple[list[str], list[float]]:
    captions = [item["caption"] for item in gallery]
    return [caption.split(" · ")[0] for caption in captions], [float(caption.split(" · ")[1]) for caption in captions]


def test_serves_on_localhost_only_and_ranks_as_the_models_do(served):
    client, files, log = served
    assert set(re.findall(r"https?://([^:/\s]+)", log.read_text())) == {"127.0.0.1"}  # no public link
    status, himo_gallery, fcast_gallery, curve = client.predict(CAPTION, TOP_K, api_name="/search")
    assert "4 sentence(s)" in status
    for checkpoint, gallery in ((files["himo"], himo_gallery), (files["fcast"], fcast_gallery)):
        names, scores = gallery_names_and_scores(gallery)
        expected_names, expected_scores = direct_ranking(checkpoint, CAPTION, files["images"])
        assert names == expected_names[:TOP_K]
        torch.testing.assert_close(torch.tensor(scores), expected_scores[:TOP_K], atol=1e-4, rtol=0)
    assert Image.open(curve).size[0] > 0  # the prefix curve (its points: test_demo.py)


def test_clear_messages_instead_of_errors(served):
    client, files, _ = served
    status, *galleries, _ = client.predict("   ", TOP_K, api_name="/search")
    assert status == "Type a caption first: the search box is empty." and galleries == [[], []]
    status, _ = client.predict(str(files["images"] / "missing"), api_name="/index_folder")
    assert status.startswith("Cannot use this folder: no such image folder")
    status, _ = client.predict(str(files["images"] / "image0.png"), api_name="/index_folder")
    assert "is a file" in status
    status, _ = client.predict(str(files["images"]), api_name="/index_folder")  # the folder served stays usable
    assert "8 images" in status and "0 embeddings computed" in status and "broken.png" in status
    fcast = str(files["fcast"])
    status, figure = client.predict(fcast, None, gradio_client.handle_file(str(files["images"] / "broken.png")),
                                    CAPTION, api_name="/ground")
    assert status.startswith("Cannot use this image: PIL cannot read broken.png") and figure is None
    status, figure = client.predict(fcast, str(files["images"] / "image0.png"), None, "", api_name="/ground")
    assert status == "Type a caption first: the caption box is empty." and figure is None
    status, figure = client.predict(fcast, str(files["images"] / "image0.png"), None, CAPTION, api_name="/ground")
    assert status == "4 sentence(s) grounded." and Image.open(figure).size[0] > 0
