"""`hf-longclip --help` starts light: the console script (`hf_longclip_cli`) parses and prints help without
importing torch, transformers or the `hf_longclip` package, while `import hf_longclip` still registers our model types
with transformers' Auto classes (checked in a fresh interpreter, where nothing else imported them first). Start-up
time is measured by benchmarks/bench_cli.py, not asserted here."""

import subprocess
import sys

HEAVY = ("torch", "transformers", "cv2", "skimage", "datasets", "hf_longclip")

# `eval --help` lists the tasks and benchmarks, `convert --help` the formats, `plan --help` the methods, from
# registries that import the package: the commands whose help is not light (timed by benchmarks/bench_cli.py)
HEAVY_HELP = ("eval", "convert", "plan")

# runs the console script's `main` on each argv of a JSON list of argv lists ("all": `--help` and every command's
# `--help` but HEAVY_HELP's), then reports which heavy modules got imported
PROBE = """
import json, sys
import hf_longclip_cli
cli = hf_longclip_cli._load_cli()
commands = cli.build_parser()._subparsers._group_actions[0].choices
argvs = ([["--help"], *([name, "--help"] for name in commands if name not in {heavy_help})] if sys.argv[1] == "all"
         else json.loads(sys.argv[1]))
for argv in argvs:
    try:
        cli.main(argv)
    except SystemExit:
        pass
print("imported:", *sorted(name for name in {heavy} if name in sys.modules))
"""


def imported_after(argvs: str) -> tuple[str, list[str]]:
    probe = PROBE.format(heavy=HEAVY, heavy_help=HEAVY_HELP)
    proc = subprocess.run([sys.executable, "-c", probe, argvs], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    *output, last = proc.stdout.strip().splitlines()
    assert last.startswith("imported:"), proc.stdout
    return "\n".join(output), last.split()[1:]


def test_help_of_every_command_imports_no_torch():
    """`hf-longclip --help` and `hf-longclip <command> --help` for every command (a command added later included)
    but HEAVY_HELP's."""
    help_text, imported = imported_after("all")
    for command in ("export-code", "install-metrics", "shard"):
        assert f"usage: hf-longclip {command}" in help_text
    assert imported == [], f"--help imported {imported}"


def test_the_probe_sees_a_command_that_imports_torch():
    """The same probe on a command that runs (export-code --check) reports torch: the check above can fail."""
    _, imported = imported_after('[["export-code", "--check", "--output", "modeling"]]')
    assert "torch" in imported and "hf_longclip" in imported


def test_import_registers_with_auto_classes_without_trust_remote_code():
    code = ("import hf_longclip, transformers\n"
            "for folder in hf_longclip.models.MODEL_FOLDERS:\n"
            "    auto = __import__(f'hf_longclip.models.{folder}', fromlist=['AUTO_CLASSES']).AUTO_CLASSES\n"
            "    config = transformers.AutoConfig.for_model(auto['AutoConfig'].model_type)\n"
            "    assert type(config) is auto['AutoConfig'], (folder, type(config))\n"
            "    assert transformers.AutoModel._model_mapping[type(config)] is auto['AutoModel'], folder\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]
