"""Two runs wanting the same cached base at once: one builds it, the other waits for the build to end (and then
finds it), instead of both training it with their own numerics (`hf_longclip.miniature.one_builder`, a file lock).
Two real processes, each with its own Accelerator."""

import subprocess
import sys
import time

import pytest

# enters the lock for `root`; the builder (no `built` file yet) writes `building`, waits for the test's `release`
# file, then writes `built`; a process finding `built` on entry reports that it saw the finished build
RUN = """
import sys, time
from pathlib import Path
from accelerate import Accelerator
from hf_longclip.miniature import one_builder

root = Path(sys.argv[1])
with one_builder(Accelerator(cpu=True), root):
    built = root / "built"
    if built.is_file():
        print("reused the finished build")
    else:
        root.mkdir(parents=True, exist_ok=True)
        (root / "building").write_text("")
        while not (root / "release").exists():
            time.sleep(0.05)
        built.write_text("")
        print("built")
"""


@pytest.mark.slow
def test_a_second_run_waits_for_the_first_build(tmp_path):
    root = tmp_path / "bases" / "clip77-key"
    command = [sys.executable, "-u", "-c", RUN, str(root)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (root / "building").exists():  # the first run holds the lock and is building
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waiting = second.stdout.readline()  # printed once the second run finds the lock taken
    (root / "release").write_text("")
    out, err = first.communicate(timeout=120)
    rest, second_err = second.communicate(timeout=120)
    assert first.returncode == 0 and out.strip() == "built", err
    assert second.returncode == 0, second_err
    assert "another run is building" in waiting, waiting + second_err
    assert rest.strip() == "reused the finished build", rest
