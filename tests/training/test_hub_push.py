"""Push a checkpoint with its model card to a loopback fake Hub (tests/helpers/fake_hub.py), then load it by repo id
in a fresh process where hf_longclip is not importable.

Why subprocesses: huggingface_hub reads HF_ENDPOINT (and HF_HUB_OFFLINE, HF_HOME, the token) once, at import, and
derives more from it then (`constants.HUGGINGFACE_CO_URL_TEMPLATE`, the trusted hosts the auth header may be sent
to, `HF_URL_HOSTS`); transformers keeps its own copies. By the time this module runs, conftest has imported
transformers, so patching constants here would have to chase every copy and would leak into other tests. Instead
every Hub client runs in a child process whose environment names the fake hub before anything is imported:
a long-lived push worker (one import of hf_longclip for all pushes, driven line by line over stdin) and a fresh
loader per check. The fake hub itself runs in this process, so tests can arm failures and read what was stored.
"""

import hashlib
import json
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx2
import pytest
import torch
from huggingface_hub import ModelCard
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

import hf_longclip.training.hub as hub_module
from helpers.builders import CAPTIONS, himo_task, tiny_himo, tiny_processor
from helpers.fake_hub import FakeHub
from helpers.fresh_process import save_checkpoint
from helpers.hub import TOKEN, hub_env
from hf_longclip.recipes.himo_clip.card import CARD as HIMO_CLIP_CARD
from hf_longclip.training.hub import _with_retries, build_model_card, is_transient
from hf_longclip.training.task import OPTIONS_FILE, save_options

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = HIMO_CLIP_CARD.template
RESULTS = {"r1_i2t": 20.3, "r1_t2i": 22.7, "himo@2": 97.5, "himo@3": 93.4, "himo@k": 0.881,
           "mean_similarity_by_prefix": [0.21, 0.24, 0.26]}  # a list, as evaluate_long_captions returns: left out
TRAINING_ARGS = {"learning_rate": 5e-4, "max_steps": 300, "per_device_train_batch_size": 64, "seed": 0,
                 "gradient_accumulation_steps": 1, "output_dir": "outputs/himo"}

PUSH_WORKER = """
import importlib.util, json, sys
from huggingface_hub import ModelCard
try:  # hub.py needs only huggingface_hub: load it alone (~1 s) rather than the package (torch, transformers: ~10 s)
    spec = importlib.util.spec_from_file_location("hf_longclip_training_hub", sys.argv[1])
    hub = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(hub)
except ImportError:  # it grew a package-relative import: the normal, slower way
    from hf_longclip.training import hub
push_to_hub = hub.push_to_hub
for line in sys.stdin:
    job = json.loads(line)
    try:
        card = job.pop("card")
        card = ModelCard(card) if card else None
        result = {"url": push_to_hub(job.pop("folder"), job.pop("repo_id"), card=card, backoff=0.01, **job)}
    except Exception as error:
        result = {"error": type(error).__name__, "message": str(error),
                  "status": getattr(getattr(error, "response", None), "status_code", None)}
    print("@@RESULT " + json.dumps(result), flush=True)
"""

FRESH_HUB_LOAD = """
import sys
sys.modules["hf_longclip"] = None  # only the checkpoint's own code may run
import torch
from huggingface_hub import hf_hub_download
from PIL import Image
from transformers import AutoModel, AutoProcessor
repo_id, captions, output = sys.argv[1], sys.argv[2].split("|"), sys.argv[3]
model = AutoModel.from_pretrained(repo_id, trust_remote_code=True).eval()
processor = AutoProcessor.from_pretrained(repo_id, trust_remote_code=True)
images = [Image.open(hf_hub_download(repo_id, f"image{i}.png")) for i in range(len(captions))]
inputs = processor(text=captions, images=images)
with torch.no_grad():
    out = model(**inputs, return_loss=True)
torch.save({"text": out.text_embeds, "image": out.image_embeds, "loss": out.loss,
            "classes": [type(model).__module__, type(processor).__module__]}, output)
"""


def folder_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


class PushWorker:
    """A child process with the fake hub's environment that runs `push_to_hub` jobs sent as JSON lines."""

    def __init__(self, env: dict, log: Path):
        self.log, self.log_path = log.open("w"), log
        self.process = subprocess.Popen([sys.executable, "-c", PUSH_WORKER, hub_module.__file__], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                        cwd=log.parent)
        self.results: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_results, daemon=True).start()

    def _read_results(self):
        for line in self.process.stdout:
            if line.startswith("@@RESULT "):
                self.results.put(json.loads(line[len("@@RESULT "):]))
        self.results.put(None)  # the worker exited

    def push(self, folder: Path, repo_id: str, card: ModelCard | None, timeout: float = 120, **kwargs) -> dict:
        job = {"folder": str(folder), "repo_id": repo_id, "card": str(card) if card else None, **kwargs}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        try:
            result = self.results.get(timeout=timeout)
        except queue.Empty:
            result = None
        if result is None:
            raise AssertionError(f"push worker stalled or died:\n{self.log_path.read_text()[-4000:]}")
        return result

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


@pytest.fixture(scope="module")
def hub():
    with FakeHub(token=TOKEN) as fake_hub:
        yield fake_hub


@pytest.fixture(autouse=True)
def no_failures_left_armed(hub):
    yield
    hub.clear_failures()


@pytest.fixture(scope="module")
def worker(hub, tmp_path_factory):
    home = tmp_path_factory.mktemp("push_home")
    push_worker = PushWorker(hub_env(hub, home), home / "worker.log")
    yield push_worker
    push_worker.close()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A saved tiny HiMo-CLIP (weights, config, code, processor files, its task's training options, 4 images) and its
    outputs before pushing; its card renders the config merged with the training options, as `recipe.publish` does."""
    path = tmp_path_factory.mktemp("run") / "himo-clip"
    model = tiny_himo()
    expected = save_checkpoint(model, tiny_processor(), CAPTIONS, path)
    save_options(himo_task(model), path)  # as `recipe.train_variants` does beside each trained checkpoint
    config = {**json.loads((path / "config.json").read_text()), **json.loads((path / OPTIONS_FILE).read_text())}
    card = build_model_card(TEMPLATE, repo_id="org/himo-tiny", info=HIMO_CLIP_CARD, results=RESULTS,
                            config=config,
                            training_args=TRAINING_ARGS, base_model=None, datasets=[],
                            dataset_name="synthetic scenes")
    return {"path": path, "expected": expected, "card": card, "digest": folder_digest(path)}


@pytest.fixture(scope="module")
def pushed(hub, worker, checkpoint):
    result = worker.push(checkpoint["path"], "org/himo-tiny", checkpoint["card"])
    assert "url" in result, result
    return result


def test_push_uploads_the_checkpoint_and_returns_the_commit_url(hub, pushed, checkpoint):
    head = hub.repos["org/himo-tiny"].at("main")
    assert pushed["url"] == f"{hub.url}/org/himo-tiny/commit/{head.oid}"
    local = {name for name in checkpoint["digest"]}
    assert {"model.safetensors", "config.json", "modeling_himo_clip.py", "configuration_himo_clip.py",
            "processing_himo_clip.py", "processor_config.json", "tokenizer.json"} <= local
    assert set(head.files) == local | {"README.md", ".gitattributes"}
    for name in local:
        assert hub.file("org/himo-tiny", name) == (checkpoint["path"] / name).read_bytes(), name
    assert hub.calls("validate-yaml") >= 1  # the card was validated by the (fake) Hub before the upload


def test_pushed_repo_loads_by_repo_id_in_a_fresh_process(hub, pushed, checkpoint, tmp_path):
    resolves = hub.calls("resolve", "org/himo-tiny")
    output = tmp_path / "loaded.pt"
    result = subprocess.run(
        [sys.executable, "-c", FRESH_HUB_LOAD, "org/himo-tiny", "|".join(CAPTIONS), str(output)],
        env={**hub_env(hub, tmp_path / "fresh_home", token=None), "PYTHONPATH": ""}, cwd=tmp_path,
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    loaded = torch.load(output)
    head = hub.repos["org/himo-tiny"].at("main").oid
    # the checkpoint's own code, fetched at the pushed commit
    assert all(module.startswith("transformers_modules.") and head in module for module in loaded["classes"])
    assert hub.calls("resolve", "org/himo-tiny") > resolves  # really downloaded from the fake hub
    for key in ("text", "image", "loss"):
        torch.testing.assert_close(loaded[key], checkpoint["expected"][key], atol=1e-6, rtol=1e-6)


def test_readme_on_the_hub_is_the_card_with_the_measured_results(hub, pushed):
    readme = hub.file("org/himo-tiny", "README.md").decode()
    card = ModelCard(readme)
    data = card.data.to_dict()
    assert data["library_name"] == "transformers"
    assert data["pipeline_tag"] == "zero-shot-image-classification"
    assert data["license"] == "apache-2.0"
    assert {"hf-longclip", "himo-clip"} <= set(data["tags"])
    assert "base_model" not in data  # trained from scratch: no base model claimed
    numeric = {k: v for k, v in RESULTS.items() if isinstance(v, float)}
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == numeric
    assert {r.dataset_name for r in card.data.eval_results} == {"synthetic scenes"}
    assert card.data.model_name == "himo-tiny"
    # the human-readable part: usage by repo id, training setup from the config, results table, citation
    assert 'AutoModel.from_pretrained("org/himo-tiny", trust_remote_code=True)' in card.text
    assert "| HiDe tau / MoLo lambda / HiDe scope | 0.9 / 1.0 / global |" in card.text
    assert "| text positions | 248 |" in card.text
    assert "| optimizer steps | 300 |" in card.text
    assert "| HiMo@K | 0.881 |" in card.text and "| R@1 image→text | 20.3 |" in card.text
    assert "@inproceedings{wu2026himoclip" in card.text
    assert "{{" not in readme and "{%" not in readme


def test_card_names_the_base_model_and_datasets(checkpoint):
    card = build_model_card(TEMPLATE, repo_id="org/himo-l14", results={"r1_i2t": 50.0}, config={},
                            base_model="openai/clip-vit-large-patch14", datasets=["Lin-Chen/ShareGPT4V"],
                            dataset_name="Urban1k", dataset_type="urban1k")
    data = ModelCard(str(card)).data
    assert data.base_model == "openai/clip-vit-large-patch14"
    assert data.datasets == ["Lin-Chen/ShareGPT4V"]
    results = [(r.dataset_type, r.metric_type, r.metric_value) for r in data.eval_results]
    assert results == [("urban1k", "r1_i2t", 50.0)]
    assert "[openai/clip-vit-large-patch14](https://huggingface.co/openai/clip-vit-large-patch14)" in card.text
    local = build_model_card(TEMPLATE, repo_id="org/himo", results={}, base_model=str(checkpoint["path"]))
    assert "base_model" not in local.data.to_dict()  # a local directory is no Hub id: the Hub would reject it
    assert f"`{checkpoint['path']}`" in local.text and "model-index" not in str(local)


def test_transient_errors_are_retried(hub, worker, checkpoint):
    repo = "org/flaky"
    hub.fail("create", 503, times=2, repo=repo)  # huggingface_hub sends create_repo once: our retry loop
    hub.fail("validate-yaml", 502, times=1)  # inside create_commit, also sent once: the commit is retried
    result = worker.push(checkpoint["path"], repo, checkpoint["card"])
    assert "url" in result, result
    assert hub.calls("create", repo) == 3
    assert hub.file(repo, "model.safetensors") == (checkpoint["path"] / "model.safetensors").read_bytes()


def test_transient_errors_give_up_after_max_retries(hub, worker, checkpoint):
    repo = "org/down"
    hub.fail("create", 503, times=5, repo=repo)
    result = worker.push(checkpoint["path"], repo, checkpoint["card"], max_retries=2)
    assert result["status"] == 503, result
    assert hub.calls("create", repo) == 3  # 1 + 2 retries
    assert repo not in hub.repos


def test_huggingface_hub_retries_single_requests_but_sends_create_repo_and_the_commit_once(hub, worker, checkpoint):
    """Why `push_to_hub` retries whole calls (`_with_retries`): huggingface_hub retries some requests itself
    (`http_backoff`: the preupload, LFS transfers), but sends create_repo and the commit once (a retried commit whose
    answer was lost would commit twice), so without our retries (`max_retries=0`) one 503 there fails the push;
    a whole create_commit re-run commits the files once."""
    hub.fail("preupload", 503, times=1, repo="org/hub-retries-preupload")
    result = worker.push(checkpoint["path"], "org/hub-retries-preupload", checkpoint["card"], max_retries=0)
    assert "url" in result, result
    assert hub.calls("preupload", "org/hub-retries-preupload") == 2  # huggingface_hub's own retry
    for endpoint in ("create", "commit"):
        repo = f"org/hub-retries-{endpoint}"
        hub.fail(endpoint, 503, times=1, repo=repo)
        result = worker.push(checkpoint["path"], repo, checkpoint["card"], max_retries=0)
        assert result["status"] == 503 and hub.calls(endpoint, repo) == 1, result
        hub.fail(endpoint, 503, times=1, repo=repo)
        assert "url" in worker.push(checkpoint["path"], repo, checkpoint["card"])  # ours: retried
        assert hub.calls(endpoint, repo) == 3


@pytest.mark.parametrize("endpoint, status, token", [
    ("create", 401, "hf_wrong_token"),  # the fake hub itself rejects the token
    ("create", 403, None),
    ("preupload", 401, None),
    ("commit", 403, None),
    ("commit", 422, None),
])
def test_client_errors_are_not_retried(hub, worker, checkpoint, endpoint, status, token):
    repo = f"org/refused-{endpoint}-{status}"
    if token is None:
        hub.fail(endpoint, status, times=5, repo=repo)
    result = worker.push(checkpoint["path"], repo, checkpoint["card"], token=token)
    assert result.get("status") == status, result
    assert "HTTPError" in result["error"] or "NotFound" in result["error"], result
    assert str(status) in result["message"]
    assert hub.calls(endpoint, repo) == 1
    assert repo not in hub.repos or set(hub.repos[repo].at("main").files) == {".gitattributes"}


def test_invalid_card_is_rejected_before_upload(hub, worker, checkpoint):
    repo = "org/bad-card"
    card = ModelCard(str(checkpoint["card"]).replace("value: 0.881", "value: high"))  # parses here, the Hub says no
    result = worker.push(checkpoint["path"], repo, card)
    assert result["error"] == "ValueError" and "Invalid metadata" in result["message"], result
    assert hub.calls("validate-yaml") and hub.calls("preupload", repo) == hub.calls("commit", repo) == 0


def test_local_checkpoint_is_untouched_by_pushes(pushed, checkpoint, hub, worker):
    hub.fail("commit", 422, times=1, repo="org/untouched")  # a failed push must not leave anything behind either
    worker.push(checkpoint["path"], "org/untouched", checkpoint["card"])
    worker.push(checkpoint["path"], "org/untouched", checkpoint["card"])
    assert folder_digest(checkpoint["path"]) == checkpoint["digest"]
    assert not (checkpoint["path"] / "README.md").exists()


def test_readme_in_the_checkpoint_is_replaced_only_on_the_hub(hub, worker, checkpoint, tmp_path):
    folder = tmp_path / "with-readme"
    shutil.copytree(checkpoint["path"], folder)
    (folder / "README.md").write_text("local notes\n")
    before = folder_digest(folder)
    result = worker.push(folder, "org/with-readme", checkpoint["card"])
    assert "url" in result, result
    assert hub.file("org/with-readme", "README.md").decode() == str(checkpoint["card"])
    assert folder_digest(folder) == before  # the staged copy's README was not written through a hard link


def test_is_transient_classifies_errors():
    request = httpx2.Request("POST", "http://127.0.0.1/api/models/o/r/commit/main")

    def http_error(status):
        return HfHubHTTPError(f"{status}", response=httpx2.Response(status, request=request))

    assert all(is_transient(http_error(s)) for s in (500, 502, 503, 504, 429, 408))
    assert not any(is_transient(http_error(s)) for s in (400, 401, 403, 404, 409, 422))
    assert is_transient(httpx2.ConnectError("refused", request=request))
    assert is_transient(httpx2.ReadTimeout("slow", request=request))
    assert is_transient(ConnectionResetError())
    assert not is_transient(ValueError("Invalid metadata in README.md"))
    assert not is_transient(OfflineModeIsEnabled("HF_HUB_OFFLINE=1"))  # a ConnectionError that retrying won't fix

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise http_error(503)
        return "ok"

    assert _with_retries("flaky", flaky, max_retries=3, backoff=0, max_backoff=0) == "ok" and len(calls) == 3

    def forbidden():
        calls.append(1)
        raise http_error(403)

    calls.clear()
    with pytest.raises(HfHubHTTPError):
        _with_retries("forbidden", forbidden, max_retries=3, backoff=0, max_backoff=0)
    assert len(calls) == 1


def test_every_model_folder_has_its_card_beside_it():
    """Each model's card info is `hf_longclip.recipes.<arch>.card.CARD`, with its Jinja template `model_card.md` beside
    it (shipped as package data)."""
    import importlib

    from hf_longclip.models import MODEL_FOLDERS

    for folder in MODEL_FOLDERS:
        card = importlib.import_module(f"hf_longclip.recipes.{folder}.card").CARD
        assert card.template == REPO / "src" / "hf_longclip" / "recipes" / folder / "model_card.md", folder
        assert card.template.is_file() and "{{ card_data }}" in card.template.read_text(), folder
        assert card.tags and card.metric_names, folder
