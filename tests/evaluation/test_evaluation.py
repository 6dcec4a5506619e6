"""The evaluation suite end to end: `hf-longclip eval` on the synthetic benchmark (every task, report and plots),
and our models or a plain transformers CLIPModel on fixtures written in the real benchmarks' formats, checked
against metrics computed here from directly computed embeddings."""

import json
import subprocess
import sys
from types import SimpleNamespace

import datasets
import pytest
import torch
import torch.nn.functional as F
from transformers import CLIPImageProcessorPil, CLIPModel, CLIPProcessor

from helpers.benchmark_files import (
    HIERARCAPS_ROWS,
    karpathy_image,
    write_corrupt,
    write_hierarcaps,
    write_image,
    write_json,
)
from helpers.builders import IMAGE_SIZE, char_clip_tokenizer, random_images, tiny_clip, tiny_himo, tiny_processor
from hf_longclip.data.benchmarks import load_benchmark
from hf_longclip.evaluation import (
    TASKS,
    available_tasks,
    encode_texts,
    evaluate_dataset,
    load_model,
    text_max_length,
)

LONG_WORDS = " ".join(f"word{i}" for i in range(40))  # far beyond 77 character tokens


def naive_recall_i2t(image_embeds, text_embeds, owners, k):
    """Image i is a hit if one of its captions is among its k best texts (full matrix, sorted)."""
    ranking = (image_embeds @ text_embeds.T).argsort(dim=1, descending=True)[:, :k]
    return 100 * sum(bool(set(row.tolist()) & {t for t, o in enumerate(owners) if o == i})
                     for i, row in enumerate(ranking)) / len(image_embeds)


def direct_embeddings(model, processor, texts, images, max_length):
    """Embeddings computed here, one call each, without the evaluation module's batching."""
    with torch.no_grad():
        tokens = processor.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        text = model.get_text_features(**tokens).pooler_output
        pixels = processor.image_processor([image.convert("RGB") for image in images], return_tensors="pt")
        image = model.get_image_features(**pixels).pooler_output
    return F.normalize(image, dim=-1), F.normalize(text, dim=-1)


@pytest.fixture(scope="module")
def himo_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("checkpoints") / "himo"
    tiny_himo(seed=3).save_pretrained(path)
    tiny_processor().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def clip_checkpoint(tmp_path_factory):
    """A plain transformers CLIPModel (77 positions) with a CLIPProcessor: no code of ours in it."""
    path = tmp_path_factory.mktemp("checkpoints") / "clip"
    tiny_clip(seed=4).save_pretrained(path)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE},
                                            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    CLIPProcessor(image_processor=image_processor, tokenizer=char_clip_tokenizer()).save_pretrained(path)
    return path


def test_eval_command_runs_every_task_on_the_synthetic_benchmark(himo_checkpoint, tmp_path):
    output = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "hf_longclip.cli", "eval", "--model", str(himo_checkpoint), "--dataset", "synthetic",
         "--data-dir", str(tmp_path / "synthetic"), "--max-samples", "24", "--batch-size", "16",
         "--output-dir", str(output), "--tie-rule", "optimistic"],  # as the naive recall below
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((output / "report.json").read_text())
    metrics = report["metrics"]
    assert report["tie_rule"] == "optimistic" and "ties credited optimistic" in result.stdout
    assert {task: metrics[task]["tie_rule"] for task in TASKS if task != "ssi"} == dict.fromkeys(
        set(TASKS) - {"ssi"}, "optimistic")  # SSI ranks nothing
    assert set(metrics) == set(TASKS) and report["num_samples"] == 24 and report["num_skipped_images"] == 0
    assert metrics["retrieval"]["num_images"] == 24 and metrics["retrieval"]["num_texts"] == 72  # 3 per scene
    assert metrics["cola"]["num_samples"] == 12  # the 12 hard-negative pairs
    assert metrics["zero_shot"]["num_samples"] == 24 and 0 <= metrics["zero_shot"]["top1"] <= 100
    assert metrics["ssi"]["num_samples"] + metrics["ssi"]["num_excluded_nonpositive"] == 24
    assert metrics["hierarcaps"]["num_chains"] == 24 and -1 <= metrics["hierarcaps"]["d_corr"] <= 1
    assert len(metrics["himo"]["mean_similarity_by_prefix"]) >= 4
    for plot in ("recall.png", "himo_prefix_similarity.png"):
        assert (output / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # retrieval recomputed here from embeddings computed directly
    from hf_longclip.data.synthetic import load_synthetic_scenes

    rows = load_synthetic_scenes(cache_dir=str(tmp_path / "synthetic"))["test"].select(range(24))
    model, processor = load_model(str(himo_checkpoint), "cpu")
    texts = [text for captions in rows["captions"] for text in captions]
    owners = [i for i in range(24) for _ in range(3)]
    images, text_embeds = direct_embeddings(model, processor, texts, rows["image"], 248)
    for k in (1, 5, 10):
        assert metrics["retrieval"][f"r{k}_i2t"] == pytest.approx(naive_recall_i2t(images, text_embeds, owners, k))


def test_plain_clip_on_coco_karpathy_with_five_captions_and_truncation(clip_checkpoint, tmp_path):
    entries = [karpathy_image(i, "test", "val2014") for i in range(6)]
    letters = torch.Generator().manual_seed(0)
    for entry in entries:  # distinct captions (no ties), the first ones longer than CLIP's 77 positions
        for sentence in entry["sentences"]:  # the distinct word first: truncation must not make two captions one
            word = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (12,), generator=letters))
            sentence["raw"] = f"{word} {LONG_WORDS if entry['imgid'] < 3 else ''}."
    write_json(tmp_path / "dataset_coco.json", {"images": entries, "dataset": "coco"})
    for index, entry in enumerate(entries):
        write_image(tmp_path / entry["filepath"] / entry["filename"], index, size=(40, 36))
    write_corrupt(tmp_path / entries[5]["filepath"] / entries[5]["filename"])
    benchmark = load_benchmark("coco", tmp_path)
    assert benchmark.num_skipped == 1

    model, processor = load_model(str(clip_checkpoint), "cpu")
    assert type(model) is CLIPModel
    report = evaluate_dataset(model, processor, benchmark.dataset, batch_size=4, progress=False)
    assert set(report) == {"retrieval"}
    retrieval = report["retrieval"]
    assert retrieval["num_images"] == 5 and retrieval["num_texts"] == 25
    texts = [text for captions in benchmark.dataset["captions"] for text in captions]
    owners = [i for i in range(5) for _ in range(5)]
    images, text_embeds = direct_embeddings(model, processor, texts, benchmark.dataset["image"], 77)
    for k in (1, 5):
        assert retrieval[f"r{k}_i2t"] == pytest.approx(naive_recall_i2t(images, text_embeds, owners, k))
    t2i_hits = ((text_embeds @ images.T).argmax(dim=1) == torch.tensor(owners)).double().mean().item() * 100
    assert retrieval["r1_t2i"] == pytest.approx(t2i_hits)
    assert retrieval["rsum"] == pytest.approx(sum(retrieval[f"r{k}_{d}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))


def test_hierarcaps_and_cola_fixtures(himo_checkpoint, tmp_path):
    write_hierarcaps(tmp_path / "hierarcaps_test.csv", HIERARCAPS_ROWS)
    write_image(tmp_path / "test_imgs/COCO_val2014_000000301718.jpg", 1, size=(40, 36))
    write_image(tmp_path / "test_imgs/100489.jpg", 2, size=(40, 36))
    hierarcaps_rows = load_benchmark("hierarcaps", tmp_path).dataset
    assert available_tasks(hierarcaps_rows) == ("retrieval", "himo", "hierarcaps")
    model, processor = load_model(str(himo_checkpoint), "cpu")
    report = evaluate_dataset(model, processor, hierarcaps_rows, tasks=["hierarcaps"], progress=False)
    assert report["hierarcaps"]["num_chains"] == len(hierarcaps_rows)
    assert 0 <= report["hierarcaps"]["precision"] <= 1
    assert report["hierarcaps"]["tie_rule"] == "first"  # HierarCaps' HCEvaluator breaks ties by position

    cola_dir = tmp_path / "cola"
    write_json(cola_dir / "COLA_multiobjects_matching_benchmark.json",
               [["a.jpg", "red cube left of blue ball", "b.jpg", "blue cube left of red ball"],
                ["b.jpg", "blue cube left of red ball", "a.jpg", "red cube left of blue ball"]])
    write_image(cola_dir / "images/a.jpg", 1, size=(40, 36))
    write_image(cola_dir / "images/b.jpg", 2, size=(40, 36))
    cola_rows = load_benchmark("cola_multi", cola_dir).dataset
    cola = evaluate_dataset(model, processor, cola_rows, progress=False)["cola"]
    # the second pair is the first with images and captions swapped: COLA's criterion is symmetric under it
    images, texts = direct_embeddings(model, processor, cola_rows[0]["captions"], cola_rows[0]["images"], 248)
    scores = images @ texts.T
    correct = bool(scores[0, 0] > scores[1, 0] and scores[1, 1] > scores[0, 1])  # ColaMultiObjAcc's strict `>`
    assert cola == {"accuracy": 100.0 * correct, "num_samples": 2, "tie_rule": "pessimistic"}


def test_unsupported_tasks_are_named(himo_checkpoint, tmp_path):
    write_hierarcaps(tmp_path / "hierarcaps_test.csv", HIERARCAPS_ROWS[:1])
    write_image(tmp_path / "test_imgs/COCO_val2014_000000301718.jpg", 1, size=(40, 36))
    rows = load_benchmark("hierarcaps", tmp_path).dataset
    model, processor = load_model(str(himo_checkpoint), "cpu")
    with pytest.raises(ValueError, match=r"tasks \['cola', 'zero_shot'\] need columns"):
        evaluate_dataset(model, processor, rows, tasks=["cola", "zero_shot"], progress=False)


def test_loss_curves_skip_records_without_a_training_loss(tmp_path, monkeypatch):
    """With --eval_steps finer than --logging_steps the history holds eval-only records: plotted lines use the
    records that have a loss, and nothing else."""
    from matplotlib.axes import Axes
    from PIL import Image

    from hf_longclip.plots import plot_loss_curves

    plotted = []
    original_plot = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda self, x, y, **kw: plotted.append((list(x), list(y), kw["label"]))
                        or original_plot(self, x, y, **kw))
    history = [{"step": 10, "eval_loss": 3.0}, {"step": 20, "loss": 2.5, "eval_loss": 2.9}, {"step": 25, "loss": 2.0}]
    path = plot_loss_curves({"himo-clip": history}, tmp_path / "loss_curves.png")
    assert plotted == [([20, 25], [2.5, 2.0], "himo-clip")]
    assert Image.open(path).size == (552, 462)  # one panel: 4.6 x (3.6 + 0.25 for its one run) inches at 120 dpi


def test_loss_curves_have_one_panel_per_objective_term(tmp_path):
    from matplotlib.figure import Figure

    from hf_longclip.plots import plot_loss_curves

    titles = []
    original = Figure.savefig
    history = [{"step": 1, "loss": 9.0, "global_loss": 4.0, "component_loss": 5.0, "eval_loss": 8.0},
               {"step": 20, "loss": 3.0, "global_loss": 1.0, "component_loss": 2.0}]
    try:
        Figure.savefig = lambda self, *args, **kwargs: (titles.extend(ax.get_title() for ax in self.axes)
                                                        or original(self, *args, **kwargs))
        plot_loss_curves({"himo-clip": history, "clip-248": [{"step": 1, "loss": 4.0}]}, tmp_path / "loss.png")
    finally:
        Figure.savefig = original
    assert titles == ["loss (each run's own objective)", "global_loss", "component_loss"]


class NoPositionTable:
    """`model` seen through a config without `max_position_embeddings`, as a RoPE text tower's config is."""

    def __init__(self, model):
        self.model = model
        self.config = SimpleNamespace(text_config=SimpleNamespace(hidden_size=model.config.text_config.hidden_size))

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_truncation_comes_from_the_processor_so_a_model_without_a_position_table_evaluates_unchanged():
    texts = [f"{LONG_WORDS} {tail}" for tail in ("red cube", "blue ball", "green cone")] + ["a short one"]
    rows = datasets.Dataset.from_dict({"image": random_images(4, seed=1), "caption": texts})
    # our processor knows its length: the model's config is never read
    himo, processor = tiny_himo(seed=5), tiny_processor(max_length=120)
    assert text_max_length(processor) == 120
    assert torch.equal(encode_texts(NoPositionTable(himo), processor, texts, batch_size=3),
                       encode_texts(himo, processor, texts, batch_size=3))
    assert (evaluate_dataset(NoPositionTable(himo), processor, rows, progress=False)
            == evaluate_dataset(himo, processor, rows, progress=False))

    # a plain CLIPProcessor: its tokenizer's model_max_length
    clip, tokenizer = tiny_clip(seed=6), char_clip_tokenizer()
    tokenizer.model_max_length = 50
    clip_processor = CLIPProcessor(image_processor=CLIPImageProcessorPil(), tokenizer=tokenizer)
    assert text_max_length(clip_processor, NoPositionTable(clip)) == 50
    with torch.no_grad():
        tokens = tokenizer(texts, padding=True, truncation=True, max_length=50, return_tensors="pt")
        direct = F.normalize(clip.get_text_features(**tokens).pooler_output, dim=-1)
    assert torch.allclose(encode_texts(NoPositionTable(clip), clip_processor, texts), direct, atol=1e-6)
    tokenizer.model_max_length = 100  # longer than the model's 77 positions: capped by them
    assert text_max_length(clip_processor, clip) == 77

    # a tokenizer that leaves its length unset: the model's position table if it has one, else a clear error
    tokenizer.model_max_length = int(1e30)
    assert text_max_length(clip_processor, clip) == 77
    with pytest.raises(ValueError, match="cannot tell how many tokens.*max_position_embeddings"):
        encode_texts(NoPositionTable(clip), clip_processor, texts)


def test_one_task_registry_for_evaluation_and_cli(capsys):
    import hf_longclip.data.benchmarks as benchmarks
    import hf_longclip.evaluation as evaluation
    import hf_longclip.evaluation.tasks as tasks
    from hf_longclip.cli import main

    assert evaluation.TASKS is tasks.TASKS and evaluation.available_tasks is tasks.available_tasks
    for name, task in TASKS.items():
        assert task.name == name and callable(task.runner) and task.runner.__module__ == tasks.__name__
    assert not any(hasattr(benchmarks, name) for name in ("TASKS", "available_tasks", "infer_tasks"))
    assert not any(hasattr(evaluation, name) for name in ("plot_loss_curves", "_pyplot", "_save_figure"))
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = capsys.readouterr().out
    assert "comma list of the tasks listed below" in " ".join(help_text.split())
    assert all(f"  {name}: " in help_text for name in TASKS)


def test_data_and_models_never_import_evaluation():
    """Evaluation imports data, never the reverse; a model's package and remote code leave its `evaluation` module
    (and the shared evaluation package) unimported, and no remote-code bundle carries it."""
    from hf_longclip.export import model_bundle
    from hf_longclip.models import MODEL_FOLDERS

    check = ("import sys, hf_longclip.data.benchmarks, hf_longclip.data.eval_datasets, hf_longclip.data.shards; "
             "loaded = [name for name in sys.modules if name.startswith('hf_longclip') and 'evaluation' in name]; "
             "assert not loaded, loaded")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not [name for arch in MODEL_FOLDERS for name in model_bundle(arch) if "evaluation" in name]

