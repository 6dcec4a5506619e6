"""The `evaluate` scripts of the metrics of issue 3: each equals its pure function, streams with add_batch, and loads
by bare name offline after `install_metrics()` in a fresh interpreter."""

import hashlib

import numpy as np
import pytest

import hf_longclip.metrics as metrics
from helpers.fresh_process import run_python_offline
from hf_longclip.metrics import (
    METRIC_NAMES,
    class_embeddings,
    cola_multi,
    hierarcaps,
    long_text_retrieval,
    ssi,
    text_pool,
    zero_shot_classification,
)
from hf_longclip.metrics.install import script_path

NEW_METRICS = ("cola_multi", "hierarcaps", "long_text_retrieval", "ssi", "zero_shot_classification")


def unit(rng, *shape):
    x = rng.standard_normal(shape).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_every_metric_has_a_script_and_a_function():
    assert set(NEW_METRICS) | {"himo_at_k"} <= set(METRIC_NAMES)
    for name in NEW_METRICS:
        assert script_path(name).is_file()
        assert "_CITATION" in script_path(name).read_text() and "Examples:" in script_path(name).read_text()
    for name in ("long_text_retrieval", "ssi", "hierarcaps", "zero_shot_classification", "cola_multi",
                 "class_embeddings", "format_prompts", "text_pool", "kendall_tau_b", "recall_at_k"):
        assert callable(getattr(metrics, name)) and name in metrics.__all__


def test_long_text_retrieval_module(isolated_modules_cache):
    rng = np.random.default_rng(0)
    owner = rng.permutation(np.repeat(np.arange(30), 5))
    images = unit(rng, 30, 8)
    texts = images[owner] + 2 * unit(rng, 150, 8)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    expected = long_text_retrieval(images, texts, owner)
    assert 0 < expected["r1_i2t"] < 100
    metric = metrics.load("long_text_retrieval", keep_in_memory=True)
    assert metric.compute(text_embeds=texts.tolist(), text_to_image=owner.tolist(), image_embeds=images) == expected
    for lo in range(0, 150, 40):  # captions streamed in batches
        metric.add_batch(text_embeds=texts[lo : lo + 40], text_to_image=owner[lo : lo + 40])
    assert metric.compute(image_embeds=images.tolist(), ks=(1, 5, 10), chunk_size=7) == expected
    with pytest.raises(ValueError, match="image_embeds is required"):
        metric.compute(text_embeds=texts, text_to_image=owner)


def test_ssi_module(isolated_modules_cache):
    original, noisy = [[0.3, 0.31, 0.32], [0.25], [0.2, 0.22]], [[0.28, 0.3, 0.33], [0.2], [0.21, 0.2]]
    metric = metrics.load("ssi", keep_in_memory=True)
    result = metric.compute(original_scores=original, noisy_scores=noisy)
    assert result == ssi(original, noisy) and result["num_samples"] == 3
    with pytest.raises(ValueError, match="must be > 0"):
        metric.compute(original_scores=[[0.0]], noisy_scores=[[0.1]])


def test_hierarcaps_module(isolated_modules_cache):
    rng = np.random.default_rng(1)
    vocab = [[f"l{level}w{w}" for w in range(n)] for level, n in enumerate((2, 4, 10, 20))]
    embed_of = {t: unit(rng, 6) * (1 + level) for level, words in enumerate(vocab) for t in words}
    chain_to_image = np.array([0, 1, 2, 3, 4, 5, 0, 3])
    chain_texts = [[str(rng.choice(words)) for words in vocab] for _ in chain_to_image]
    chain_embeds = np.array([[embed_of[t] for t in chain] for chain in chain_texts], dtype=np.float32)
    images, root = unit(rng, 6, 6), unit(rng, 6)
    _, text_embeds, chains = text_pool(chain_texts, chain_embeds)
    expected = hierarcaps(images, text_embeds, chains, root, chain_to_image=chain_to_image)
    metric = metrics.load("hierarcaps", keep_in_memory=True)
    result = metric.compute(chain_embeds=chain_embeds, chain_texts=chain_texts, chain_to_image=chain_to_image,
                            image_embeds=images, root_embed=root)
    assert result == pytest.approx(expected)
    assert metric.compute(chain_embeds=chain_embeds, chain_texts=chain_texts, chain_to_image=chain_to_image,
                          image_embeds=images, root_embed=root, num_thresholds=3) == pytest.approx(
        hierarcaps(images, text_embeds, chains, root, chain_to_image=chain_to_image, num_thresholds=3))
    with pytest.raises(ValueError, match="image_embeds and root_embed are required"):
        metric.compute(chain_embeds=chain_embeds, chain_texts=chain_texts, chain_to_image=chain_to_image,
                       image_embeds=images)


def test_zero_shot_classification_module(isolated_modules_cache):
    rng = np.random.default_rng(2)
    classes = class_embeddings(rng.standard_normal((10, 3, 8))).float().numpy()
    labels = rng.integers(0, 10, 120)
    images = classes[labels] + unit(rng, 120, 8)
    expected = zero_shot_classification(images, classes, labels)
    metric = metrics.load("zero_shot_classification", keep_in_memory=True)
    assert metric.compute(image_embeds=images, labels=labels, class_embeds=classes) == expected
    assert metric.compute(image_embeds=images, labels=labels, class_embeds=classes, ks=(2,)) == (
        zero_shot_classification(images, classes, labels, ks=(2,)))
    with pytest.raises(ValueError, match="class_embeds is required"):
        metric.compute(image_embeds=images, labels=labels)


def test_cola_multi_module(isolated_modules_cache):
    scores = np.random.default_rng(3).random((50, 2, 2))
    metric = metrics.load("cola_multi", keep_in_memory=True)
    for direction in ("text_to_image", "image_to_text", "group"):
        assert metric.compute(scores=scores, direction=direction) == cola_multi(scores, direction=direction)
    assert metric.compute(scores=scores) == cola_multi(scores)


_BARE_NAME_SCRIPT = """
import doctest, json, sys
import evaluate
from hf_longclip.metrics import install_metrics
names = %r
installed = install_metrics()
out = {"installed": [str(p) for p in installed], "modules": {}, "doctests": {}}
for name in names:
    metric = evaluate.load(name)
    module = sys.modules[type(metric).__module__]
    out["modules"][name] = module.__name__
    test = doctest.DocTestParser().get_doctest(module._KWARGS_DESCRIPTION, {"evaluate": evaluate}, name, None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    out["doctests"][name] = list(runner.summarize(verbose=False))
out["ssi"] = evaluate.load("ssi").compute(original_scores=[[0.222], [0.5, 0.25]], noisy_scores=[[0.189], [0.375, 0.25]])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_bare_name_load_offline_in_fresh_interpreter(tmp_path):
    """`evaluate.load("<name>")` finds each installed script offline; the examples of its docs run and hold."""
    out = run_python_offline(_BARE_NAME_SCRIPT % (NEW_METRICS,), tmp_path)
    metrics_dir = tmp_path / "modules" / "evaluate_modules" / "metrics"
    for name in NEW_METRICS:
        digest = hashlib.sha256(script_path(name).read_bytes()).hexdigest()
        assert str(metrics_dir / f"evaluate-metric--{name}" / digest / f"{name}.py") in out["installed"]
        assert out["modules"][name] == f"evaluate_modules.metrics.evaluate-metric--{name}.{digest}.{name}"
        failed, attempted = out["doctests"][name]
        assert failed == 0 and attempted >= 2, (name, out["doctests"][name])
    # (|0.222 - 0.189| / 0.222 + (25 + 0) / 2 / 100) / 2 * 100
    assert out["ssi"] == {"ssi": pytest.approx((0.033 / 0.222 * 100 + 12.5) / 2), "num_samples": 2, "num_subtexts": 3}
