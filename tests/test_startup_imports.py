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


def mlflow_switches(env: dict[str, str], home: Path) -> list[str]:
    """MLflow's telemetry and SGC-resumption switches, and whether its telemetry client exists, after
    the project's settings are imported in a fresh interpreter with ``env``."""
    code = (
        "import os, fedclust.settings\n"
        "from mlflow.telemetry import get_telemetry_client\n"
        "print(os.environ.get('MLFLOW_DISABLE_TELEMETRY'), "
        "os.environ.get('MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS'), "
        "get_telemetry_client() is None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(SRC), "PATH": "", "MPLBACKEND": "Agg", "HOME": str(home), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def test_mlflow_telemetry_is_off_unless_the_user_turns_it_on(tmp_path):
    assert mlflow_switches({}, tmp_path) == ["true", "false", "True"]
    # a user's choice stands
    assert mlflow_switches({"MLFLOW_DISABLE_TELEMETRY": "false"}, tmp_path) == ["false", "false", "False"]
    assert mlflow_switches({"MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS": "true"}, tmp_path)[1] == "true"


def test_sgc_run_resumption_is_left_to_mlflow_on_databricks(tmp_path):
    assert mlflow_switches({"DATABRICKS_RUNTIME_VERSION": "15.4"}, tmp_path)[1] == "None"
