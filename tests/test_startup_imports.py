"""What every ``kedro`` command pays: Kedro loads ``fedclust.settings`` (our hooks, the method registry)
before any command, even ``kedro --version``. Heavy libraries that only some runs use must not be
imported there; each is loaded by the code that needs it."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def fresh(code: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> list[str]:
    """The words ``code`` prints in a fresh interpreter with this checkout's sources and ``env``."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(SRC), "PATH": "", "MPLBACKEND": "Agg", **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def modules_after(statement: str) -> set[str]:
    """The top-level packages imported by ``statement`` in a fresh interpreter."""
    return set(fresh(f"{statement}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"))


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


ENV_NAMES = (
    "MLFLOW_DISABLE_TELEMETRY",
    "MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "MLFLOW_HTTP_REQUEST_TIMEOUT",
)


def mlflow_switches(env: dict[str, str], home: Path, cwd: Path, first: str = "") -> list[str]:
    """MLflow's telemetry and SGC-resumption switches, and whether its telemetry client exists, after
    ``first`` and then MLflow's import in a fresh interpreter started in ``cwd`` with ``env``."""
    code = (
        f"import os\n{first}\n"
        "from mlflow.telemetry import get_telemetry_client\n"
        "print(os.environ.get('MLFLOW_DISABLE_TELEMETRY'), "
        "os.environ.get('MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS'), "
        "get_telemetry_client() is None)"
    )
    return fresh(code, {"HOME": str(home), **env}, cwd)


ROOT = SRC.parent
INIT = "from fedclust.environment import kedro_init; kedro_init()"


def test_mlflow_telemetry_is_off_in_the_project_unless_the_user_turns_it_on(tmp_path):
    # Kedro's first step in every command (the kedro.init entry point), before MLflow loads
    assert mlflow_switches({}, tmp_path, ROOT, INIT) == ["true", "false", "True"]
    # a user's choice stands
    assert mlflow_switches({"MLFLOW_DISABLE_TELEMETRY": "false"}, tmp_path, ROOT, INIT) == ["false", "false", "False"]
    on = {"MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS": "true"}
    assert mlflow_switches(on, tmp_path, ROOT, INIT)[1] == "true"


def test_sgc_run_resumption_is_left_to_mlflow_on_databricks(tmp_path):
    assert mlflow_switches({"DATABRICKS_RUNTIME_VERSION": "15.4"}, tmp_path, ROOT, INIT)[1] == "None"


def test_another_kedro_project_keeps_its_environment(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[tool.kedro]\npackage_name = "other"\n')
    assert mlflow_switches({}, tmp_path, other, INIT)[:2] == ["None", "None"]


def test_importing_the_settings_changes_no_environment_variable():
    code = (
        "import os\nbefore = dict(os.environ)\nimport fedclust.settings\n"
        "print(*sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)))"
    )
    changed = set(fresh(code))
    # MLflow's own import sets variables of its own (a telemetry session id ...): ours are not among them
    assert not changed & {*ENV_NAMES, "PATH"}, changed


def test_the_environment_defaults_are_kedros_first_step():
    # declared as a kedro.init entry point: Kedro runs those before the settings and any plugin
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["kedro.init"] == {"fedclust": "fedclust.environment:kedro_init"}
    # and python -m fedclust applies them before importing Kedro
    main = (SRC / "fedclust" / "__main__.py").read_text()
    assert main.index("apply_defaults()") < main.index("from kedro")


def test_a_run_tells_mlflow_it_is_no_notebook_without_importing_ipython():
    # inside the block MLflow's probe answers at once and IPython stays unloaded; after it the usual
    # state is back: Ray, for one, asks `"IPython" in sys.modules` and then imports it
    code = (
        "import sys\nfrom fedclust.environment import no_notebook_probe\n"
        "from mlflow.tracking.context.jupyter_notebook_context import JupyterNotebookRunContext\n"
        "with no_notebook_probe():\n    inside = JupyterNotebookRunContext().in_context()\n"
        "print(inside, 'IPython' in sys.modules)"
    )
    assert fresh(code)[-2:] == ["False", "False"]


def test_the_notebook_probe_hook_wraps_the_runs_opening():
    # a wrapper around every plugin's before_pipeline_run (kedro-mlflow opens the MLflow run there):
    # IPython is marked unavailable while the others run, and the mark goes when they return
    code = (
        "import sys\nfrom fedclust.settings import HOOKS\nfrom fedclust.hooks import NotebookProbeHook\n"
        "hook = next(h for h in HOOKS if isinstance(h, NotebookProbeHook)).before_pipeline_run\n"
        "gen = hook(None, None, None)\nnext(gen)\ninside = sys.modules.get('IPython', 'absent')\n"
        "try:\n    gen.send('result')\nexcept StopIteration as stop:\n    value = stop.value\n"
        "print(hook.kedro_impl['wrapper'], inside is None, value, 'IPython' in sys.modules)"
    )
    assert fresh(code)[-4:] == ["True", "True", "result", "False"]


def test_settings_import_leaves_the_registry_scikit_learn_and_pyplot_unloaded():
    loaded = modules_after("import fedclust.settings\nimport sys\nprint(*[m for m in sys.modules], sep='\\n')")
    assert "fedclust" in loaded
    assert not {"sklearn", "torch", "IPython"} & loaded
    code = (
        "import sys, fedclust.settings\nprint('fedclust.registry' in sys.modules, 'matplotlib.pyplot' in sys.modules)"
    )
    assert fresh(code) == ["False", "False"]
