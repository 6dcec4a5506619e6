"""The demo without a server: the embedding cache (reused, refreshed on a changed folder or model), faiss search
against a brute-force ranking, the Space writer and the command's refusals."""

import os
import shutil

import pytest
import torch
from PIL import Image

from helpers.demo import image_paths, write_demo_files
from hf_longclip import cli
from hf_longclip.demo.index import build_index, cache_file, list_images
from hf_longclip.evaluation import load_model
from hf_longclip.evaluation.encoding import encode_images


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_demo_files(tmp_path_factory.mktemp("files"))


@pytest.fixture(scope="module")
def himo(files):
    return load_model(str(files["himo"]), device="cpu")


def test_cache_is_reused_and_refreshed_for_changed_images_only(files, himo, tmp_path):
    model, processor = himo
    folder = tmp_path / "images"
    shutil.copytree(files["images"], folder)
    first = build_index(model, processor, folder, tmp_path / "cache", progress=False)
    assert (first.encoded, first.skipped, len(first.paths)) == (8, ["broken.png"], 8)
    torch.testing.assert_close(first.embeddings, encode_images(model, processor, [Image.open(p) for p in
                                                                                  image_paths(folder)]))
    again = build_index(model, processor, folder, tmp_path / "cache", progress=False)
    assert again.encoded == 0 and torch.equal(again.embeddings, first.embeddings)

    (folder / "image0.png").unlink()  # removed: dropped; modified: re-encoded; added: encoded
    Image.open(folder / "image2.png").transpose(Image.FLIP_LEFT_RIGHT).save(folder / "image1.png")
    os.utime(folder / "image1.png", ns=(1, 1))
    shutil.copy(folder / "image3.png", folder / "image9.png")
    changed = build_index(model, processor, folder, tmp_path / "cache", progress=False)
    assert changed.encoded == 2 and [p.name for p in changed.paths] == [f"image{i}.png" for i in (1, 2, 3, 4, 5, 6,
                                                                                                  7, 9)]
    torch.testing.assert_close(changed.embeddings, encode_images(model, processor, [Image.open(p) for p in
                                                                                    changed.paths]))
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 1


def test_a_changed_model_recomputes(files, himo, tmp_path):
    model, processor = himo
    before = cache_file(tmp_path, model, files["images"])
    checkpoint = tmp_path / "himo"
    shutil.copytree(files["himo"], checkpoint)
    retrained, _ = load_model(str(checkpoint), device="cpu")
    assert cache_file(tmp_path, retrained, files["images"]) != before  # another directory
    weights = next(checkpoint.glob("*.safetensors"))
    moved = cache_file(tmp_path, retrained, files["images"])
    os.utime(weights, ns=(1, 1))  # the same directory, rewritten weights
    assert cache_file(tmp_path, retrained, files["images"]) != moved


def test_faiss_search_is_the_cosine_ranking(files, himo, tmp_path):
    model, processor = himo
    index = build_index(model, processor, files["images"], tmp_path, progress=False)
    query = torch.nn.functional.normalize(torch.randn(index.embeddings.shape[1]), dim=0)
    scores, rows = index.search(query, 3)
    expected = (index.embeddings @ query).sort(descending=True)
    assert rows == expected.indices[:3].tolist()
    torch.testing.assert_close(torch.tensor(scores), expected.values[:3])


def test_bad_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such image folder"):
        list_images(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        list_images(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="no images in"):
        list_images(tmp_path)


def test_write_space(tmp_path, files, capsys):
    cli.main(["demo", "--write-space", str(tmp_path / "space"), "--model", "org/himo-clip", "--model",
              "org/fcast", "--images", str(files["images"])])
    space = tmp_path / "space"
    app = (space / "app.py").read_text()
    assert "MODELS = ['org/himo-clip', 'org/fcast']" in app and "images='images'" in app and "0.0.0.0" in app
    compile(app, "app.py", "exec")
    readme = (space / "README.md").read_text()
    assert readme.startswith("---\n") and "sdk: gradio\n" in readme and "  - org/fcast\n" in readme
    assert "hf-longclip[demo]" in (space / "requirements.txt").read_text()
    assert sorted(p.name for p in (space / "images").iterdir()) == sorted(p.name for p in files["images"].iterdir())


def test_write_space_refuses_local_models(tmp_path, files):
    with pytest.raises(ValueError, match="loads its models from the Hub"):
        cli.main(["--debug", "demo", "--write-space", str(tmp_path), "--model", str(files["himo"]), "--dataset",
                  "synthetic"])


def test_the_command_says_what_to_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no outputs/himo/ here
    with pytest.raises(SystemExit):
        cli.main(["demo"])
    assert "no --model given and no checkpoints under outputs/himo/" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["demo", "--model", "org/x"])
    assert "one of --images DIR or --dataset NAME" in capsys.readouterr().err


def test_missing_gradio_gives_the_install_command(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "gradio", None)
    with pytest.raises(SystemExit, match=r'pip install "hf-longclip\[demo\]"'):
        cli.main(["demo", "--model", "org/x", "--images", "."])


def test_search_curve_ends_at_the_top_score_and_refuses_empty_captions(files, himo, tmp_path):
    from helpers.demo import CAPTION
    from hf_longclip.demo.app import Demo, DemoModel, prefix_figure

    demo = Demo([DemoModel(str(files["himo"]), *himo)], tmp_path)
    assert demo.search(CAPTION, 3)[0].startswith("No image folder is indexed")
    assert "8 images" in demo.index_folder(str(files["images"]))
    assert demo.search(" \n ", 3) == ("Type a caption first: the search box is empty.", [[]], [])
    status, [gallery], curve = demo.search(CAPTION, 3)
    assert status.startswith("4 sentence(s).") and len(gallery) == 3
    assert [point["sentences"] for point in curve] == [1, 2, 3, 4]  # one point per caption prefix
    top_score = float(gallery[0][1].split(" · ")[1])
    assert curve[-1]["similarity"] == pytest.approx(top_score, abs=1e-4)  # the last prefix is the whole caption
    assert Image.open(prefix_figure(curve)).size[0] > 0


@pytest.mark.parametrize("row", ["fcast", "flair"])
def test_one_attention_map_per_sentence_over_the_image_shown(row):
    from helpers.fcast import random_images, tiny_fcast
    from helpers.fcast import tiny_processor as fcast_processor
    from hf_longclip.demo.app import sentence_attention_maps

    model, processor = tiny_fcast(row=row).eval(), fcast_processor()
    sentences = ["A red circle is on the left.", "A blue square is at the top.", "The ground is plain."]
    shown, maps = sentence_attention_maps(model, processor, random_images(1)[0], sentences)
    assert shown.dtype.name == "uint8" and shown.shape == (32, 32, 3) and len(maps) == 3
    for heat in maps:
        assert heat.shape == (32, 32) and heat.min() >= 0
        assert heat.sum() <= 1.0 + 1e-4  # the attention's mass, less what falls on superpixel ids without pixels
        if row == "flair":  # a ViT's patches all have pixels
            assert heat.sum() == pytest.approx(1.0, abs=1e-4)
    # the image shown is the processor's pixels, un-normalised
    pixels = processor(images=random_images(1))["pixel_values"][0]
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in (processor.image_processor.image_mean,
                                                         processor.image_processor.image_std))
    expected = ((pixels * std + mean).clamp(0, 1).permute(1, 2, 0) * 255).round()
    assert torch.equal(torch.from_numpy(shown).float(), expected)
