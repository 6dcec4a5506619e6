"""Every command and option the README names exists: each command line of its ```bash blocks (hf-longclip
commands, `hf download`, `accelerate launch` and the example scripts) is checked against that command's `--help`,
and every `--option` the README's prose names against the help of the commands it names. Every example script
also takes a pretrained start and the tower locks."""

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
SCRIPTS = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "examples").glob("train_*.py"))
INSTALL = ("python -m pip", "python -m pytest")  # CI's two lines: pip's and pytest's own options


@functools.cache
def help_text(*command: str) -> str:
    """`command --help`'s output (a script runs with this interpreter), failing if the command does not exist."""
    argv = [sys.executable, *command] if command[0].endswith(".py") else list(command)
    proc = subprocess.run([*argv, "--help"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1"))
    assert proc.returncode == 0, f"{' '.join(command)} --help failed:\n{proc.stderr[-2000:]}"
    return proc.stdout


def readme_commands() -> list[str]:
    """Each command of the README's bash blocks: continuation lines joined, `&&` chains split, comments dropped."""
    commands = []
    for block in BASH_BLOCK.findall(README):
        for line in block.replace("\\\n", " ").splitlines():
            for command in line.split("&&"):
                command = command.split(" #")[0].strip()
                if command and not command.startswith(INSTALL):
                    commands.append(command)
    return commands


def checked_parts(command: str) -> list[tuple[tuple[str, ...], list[str]]]:
    """[(the command whose --help is read, the options given to it)] of one command line."""
    tokens = shlex.split(command)
    options = [token.split("=")[0] for token in tokens if token.startswith("--")]
    program = tokens[0]
    if program == "hf-longclip":
        return [(("hf-longclip", next(t for t in tokens[1:] if not t.startswith("-"))), options)]
    if program == "hf":
        return [(("hf", tokens[1]), options)]
    if program == "accelerate":
        script = next(index for index, token in enumerate(tokens) if token.endswith(".py"))
        return [(("accelerate", "launch"), [t for t in tokens[2:script] if t.startswith("--")]),
                ((tokens[script],), [t for t in tokens[script + 1:] if t.startswith("--")])]
    if program == "curl":
        return []  # not ours
    raise AssertionError(f"the README runs {program!r}, which this test does not know: add it")


def test_the_readme_names_a_quick_start_from_released_weights():
    commands = readme_commands()
    assert any(c.startswith("hf download ") for c in commands)
    assert any(c.startswith("hf-longclip convert ") for c in commands)
    assert any(c.startswith("hf-longclip shard ") for c in commands)
    assert 'AutoModel.from_pretrained("longclip-L", trust_remote_code=True)' in README


@pytest.mark.slow  # the scripts' --help imports torch and transformers
@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_and_option_exists(command):
    for help_command, options in checked_parts(command):
        text = help_text(*help_command)
        missing = [option for option in options if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)]
        assert not missing, f"`{' '.join(help_command)} --help` lacks {missing} (README: {command})"


@pytest.mark.slow
def test_every_option_the_readme_names_exists():
    named_commands = {("hf-longclip", name) for name in re.findall(r"hf-longclip ([a-z][a-z-]+)", README)}
    helps = "\n".join(help_text(*command) for command in sorted(named_commands | {(script,) for script in SCRIPTS}))
    helps += help_text("accelerate", "launch") + help_text("hf", "download") + help_text("pytest")
    prose = "\n".join(line for line in README.splitlines() if not line.startswith(INSTALL))
    missing = sorted({option for option in OPTION.findall(prose)
                      if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", helps)})
    assert not missing, f"the README names options no command has: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_takes_a_pretrained_start_the_locks_and_shards(script):
    text = help_text(script)
    assert "--init_from_clip" in text or "--init_from_checkpoint" in text
    for option in ("--lock_image", "--lock_text", "--lock_image_unlocked_layers", "--train_shards",
                   "--resume_from_checkpoint", "--overwrite_output_dir"):
        assert option in text, f"{script} --help lacks {option}"
