"""What every ``kedro`` command pays: Kedro loads ``fedclust.settings`` (our hooks, the method registry)
before any command, even ``kedro --version``. Heavy libraries that only some runs use must not be
imported there; each is loaded by the code that needs it."""

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def modules_after(statement: str) -> set[str]:
    """The top-level packages imported by ``statement`` in a fresh interpreter."""
    code = f"{statement}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(SRC), "PATH": "", "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


@pytest.mark.parametrize("statement", ["import fedclust.settings", "import fedclust.registry"])
def test_project_settings_and_registry_leave_accounting_libraries_unloaded(statement):
    loaded = modules_after(statement)
    assert "fedclust" in loaded  # the statement did run
    # dp-accounting (about a second, with SciPy's signal module): only privacy accounting needs it
    assert "dp_accounting" not in loaded


def test_accounting_still_loads_dp_accounting_when_it_accounts():
    loaded = modules_after(
        "from fedclust.privacy import GaussianRelease\n"
        "from fedclust.privacy.accountants import epsilon\n"
        "assert epsilon([GaussianRelease((1.0,), count=10)], 1e-5) > 0"
    )
    assert "dp_accounting" in loaded
