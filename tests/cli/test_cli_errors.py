"""What a new user meets on a mistake: `hf-longclip` answers a user error (a missing checkpoint directory, a Hub id
that cannot be downloaded, an unknown task) with one line on stderr and exit status 2, fast, and `--debug` shows the
traceback; every option of every command and example script says what it does and its default."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import CLIPImageProcessorPil, CLIPProcessor

from helpers.builders import IMAGE_SIZE, char_clip_tokenizer, tiny_clip, tiny_himo, tiny_processor
from hf_longclip.cli import main
from hf_longclip.evaluation import TASKS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(args: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    """Run `args` in a fresh interpreter from an empty directory, with a Hub cache of its own under `tmp_path` and
    the Hub offline unless `env` says otherwise. (How long the errors take is not asserted here: no timed assertions
    in tests.)"""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    environ.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1")
    environ.update(env)
    environ = {k: v for k, v in environ.items() if v is not None}
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)
    return subprocess.run(args, cwd=workdir, env=environ, capture_output=True, text=True, timeout=300)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "hf_longclip.cli", *args]


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The single line a user error prints on stderr (asserting it is one line, no traceback, exit status 2)."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hf-longclip: error: "), lines[0]
    return lines[0]


def closed_port() -> int:
    """A local TCP port nothing listens on (connecting to it is refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def himo_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("checkpoints") / "himo"
    tiny_himo(seed=0).save_pretrained(path)
    tiny_processor().save_pretrained(path)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["outputs/himo/does-not-exist", "./does-not-exist"])
def test_missing_checkpoint_directory_is_one_line(model, tmp_path):
    proc = run(cli("eval", "--model", model, "--dataset", "synthetic"), tmp_path)
    line = error_line(proc)
    assert model in line and "does not exist" in line and "directory" in line
    assert "Repo id" not in line  # not mistaken for a malformed Hub id


@pytest.mark.parametrize("where", ["before the command", "after the command"])
def test_debug_shows_the_traceback(where, tmp_path):
    args = ["eval", "--model", "outputs/himo/does-not-exist", "--dataset", "synthetic"]
    args = ["--debug", *args] if where == "before the command" else [*args, "--debug"]
    proc = run(cli(*args), tmp_path)
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "FileNotFoundError" in proc.stderr, proc.stderr[-3000:]
    assert "outputs/himo/does-not-exist" in proc.stderr


def test_hub_id_offline_fails_fast_saying_what_to_do(tmp_path):
    proc = run(cli("eval", "--model", "openai/clip-vit-base-patch32", "--dataset", "synthetic"), tmp_path)
    line = error_line(proc)
    assert "openai/clip-vit-base-patch32" in line and "HF_HUB_OFFLINE" in line
    assert "download it first" in line and "local checkpoint directory" in line


def test_hub_id_without_network_fails_fast_without_retries(tmp_path):
    """The Hub refuses connections (no HF_HUB_OFFLINE): one short probe, not huggingface_hub's retries."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    proc = run(cli("eval", "--model", "openai/clip-vit-base-patch32", "--dataset", "synthetic"), tmp_path,
                        HF_HUB_OFFLINE=None, HF_ENDPOINT=endpoint)
    line = error_line(proc)
    assert "cannot reach the Hub" in line and "openai/clip-vit-base-patch32" in line and "download it first" in line


def test_cached_hub_id_loads_from_the_cache_without_network(tmp_path):
    """A model in the Hub cache loads at once when the Hub cannot be reached, instead of after each file's retries."""
    snapshot = tmp_path / "hf_home" / "hub" / "models--someone--tiny-clip" / "snapshots" / ("0" * 40)
    tiny_clip().save_pretrained(snapshot)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE},
                                            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    CLIPProcessor(image_processor=image_processor, tokenizer=char_clip_tokenizer()).save_pretrained(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    script = ("from hf_longclip.evaluation import load_model; "
              "model, processor = load_model('someone/tiny-clip', 'cpu'); print(type(model).__name__)")
    proc = run([sys.executable, "-c", script], tmp_path, HF_HUB_OFFLINE=None,
                        HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "CLIPModel"


# ---------------------------------------------------------------------------------------------------------------
# --tasks
# ---------------------------------------------------------------------------------------------------------------
def test_unknown_task_lists_the_valid_ones(himo_checkpoint, tmp_path):
    proc = run(cli("eval", "--model", str(himo_checkpoint), "--dataset", "synthetic", "--tasks", "retrieval,bogus",
                      "--data-dir", str(tmp_path / "synthetic")), tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "bogus" in message and "--tasks" in message
    assert all(name in message for name in TASKS), message
    assert not (tmp_path / "synthetic").exists()  # refused before the dataset is generated


# ---------------------------------------------------------------------------------------------------------------
# --help
# ---------------------------------------------------------------------------------------------------------------
def option_helps(help_text: str) -> dict[str, str]:
    """{first long flag: its help text} for each option of an argparse `--help` (-h/--help itself left out)."""
    section = re.split(r"^(?:options|optional arguments):$", help_text, flags=re.MULTILINE)[1]
    helps, current = {}, None
    for line in section.splitlines()[1:]:
        if not line.strip():  # the options end at the first blank line (an epilog may follow)
            break
        entry = re.match(r"^  (-\S.*?)(?: {2,}(.*))?$", line)
        if entry:  # "  --flag METAVAR, --other METAVAR   help": the help may start on the next line
            current = re.findall(r"--[\w-]+", entry.group(1))[0]
            helps[current] = entry.group(2) or ""
        elif current is not None:
            helps[current] += " " + line.strip()
    helps.pop("--help", None)
    return {flag: " ".join(text.split()) for flag, text in helps.items()}


def assert_every_option_documented(help_text: str, expected: set[str]) -> None:
    helps = option_helps(help_text)
    assert expected <= set(helps), expected - set(helps)
    for flag, text in helps.items():
        positive = re.sub(r"^--no[_-]", "--", flag)
        if positive != flag and positive in helps:  # HfArgumentParser's --no_x of a boolean defaulting to True
            continue
        assert text, f"{flag} has no help text"
        assert re.search(r"\bdefault\b|\brequired\b", text), f"{flag} does not tell its default: {text!r}"


@pytest.mark.parametrize("command, expected", [
    ((), {"--debug"}),
    (("eval",), {"--debug", "--model", "--dataset", "--data-dir", "--split", "--max-samples", "--tasks",
                 "--batch-size", "--device", "--output-dir"}),
    (("export-code",), {"--debug", "--output", "--check"}),
    (("install-metrics",), {"--debug"}),
])
def test_every_cli_option_has_help_and_default(command, expected, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert_every_option_documented(capsys.readouterr().out, expected)


def test_every_train_himo_option_has_help_and_default(tmp_path):
    proc = run([sys.executable, str(EXAMPLES / "train_himo.py"), "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {"--variants", "--dataset_seed", "--num_train", "--patch_size", "--learning_rate", "--adam_beta2",
                "--warmup_steps", "--logging_steps", "--per_device_eval_batch_size", "--lora_r", "--push_to_hub",
                "--hub_model_id"}
    assert_every_option_documented(proc.stdout, expected)
