"""When transformers' common model tests cannot be fetched, the run says so at its end in one line: the test
classes, how many tests were skipped and why (tests/conftest.py's `pytest_terminal_summary`), beside each test's own
skip reason. Checked on pytest runs in a subprocess where the fetch is impossible: an empty cache and a source
distribution that does not exist."""

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
HIMO_CLIP, DITM = (TESTS / "models" / arch / f"test_modeling_common_{arch}.py" for arch in ("himo_clip", "ditm"))
SUMMARY = "transformers' common model tests did not run"


def run_pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_LONGCLIP_TRANSFORMERS_TESTS_CACHE=str(tmp_path / "empty_cache"),
               HF_LONGCLIP_TRANSFORMERS_SDIST=str(tmp_path / "no-such-transformers.tar.gz"))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=TESTS.parent,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_common_tests_that_cannot_be_fetched_are_named_in_one_line_at_the_end(tmp_path):
    result = run_pytest(tmp_path, str(HIMO_CLIP), str(DITM), "-k", "ModelTest")
    lines = result.stdout.splitlines()
    skipped = int(re.fullmatch(r"(\d+) skipped, \d+ deselected in .*", lines[-1]).group(1))
    assert skipped >= 2  # every test of the two classes (the mixins' own are absent with them)
    summary = [line for line in lines if SUMMARY in line]
    assert len(summary) == 1, result.stdout[-3000:]
    reason = (f"transformers' common tests unavailable: HF_LONGCLIP_TRANSFORMERS_SDIST={tmp_path}"
              "/no-such-transformers.tar.gz is not a file")
    assert f" {SUMMARY} in 2 test classes (DITMModelTest, HiMoCLIPModelTest; {skipped} tests skipped): {reason} " \
        in summary[0]
    assert lines.index(summary[0]) >= len(lines) - 3  # at the end, beside the final counts


def test_a_run_without_such_skips_has_no_summary_line(tmp_path):
    result = run_pytest(tmp_path, str(HIMO_CLIP), "-k", "HiMoCLIPUsageTest and return_dict")
    assert result.stdout.splitlines()[-1].startswith("1 passed")
    assert SUMMARY not in result.stdout
