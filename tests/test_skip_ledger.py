"""No silent skips: a skip fails the run unless the test carries an allowing marker, and the summary
counts the skips (tests/conftest.py, SkipLedger)."""

import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

DEMO = """
import pytest

def test_runs():
    assert True

@pytest.mark.allow_skip("the demo's reason")
def test_allowed():
    pytest.skip("allowed")

@pytest.mark.external_data
def test_missing_data():
    pytest.skip("no data here")
"""

SILENT = """
import pytest

def test_silent():
    pytest.skip("nobody allowed this")
"""


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    allow_skip\n    external_data\n    slow\n")
    (tmp_path / "test_demo.py").write_text(body)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_allowed_skips_are_counted_and_pass(tmp_path):
    res = _run(tmp_path, DEMO)
    assert res.returncode == 0, res.stdout
    assert "skipped: 2 (2 allowed by a marker, 0 not allowed)" in res.stdout


def test_a_skip_without_an_allowing_marker_fails_the_run(tmp_path):
    res = _run(tmp_path, DEMO + SILENT)
    assert res.returncode == 1, res.stdout
    assert "skipped: 3 (2 allowed by a marker, 1 not allowed)" in res.stdout
    assert "skipped without an allowing marker: test_demo.py::test_silent" in res.stdout
