"""The process environment a fedclust command starts with: set by the command line, never on import.

Kedro runs the ``kedro.init`` entry points of installed packages first thing in every ``kedro``
command, before it loads a project's settings or any plugin (kedro-mlflow's imports MLflow).
fedclust registers :func:`kedro_init` there (``pyproject.toml``), and ``python -m fedclust`` calls
:func:`apply_defaults` itself. Each default is ``os.environ.setdefault``: a value the user set wins.

* ``MLFLOW_DISABLE_TELEMETRY=true``: MLflow's usage telemetry is off unless the user turns it on
  (``MLFLOW_DISABLE_TELEMETRY=false``). A tool for private analyses does not report on its users by
  default, and its background threads cost a tiny run about a second. MLflow reads it when it is
  first imported, hence so early.
* ``MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS=false`` outside Databricks: MLflow resumes
  the run of a Databricks serverless GPU job on its own; anywhere else its probe only imports
  IPython (a quarter of a second).
* MLflow's HTTP retries: a tracking server that does not answer ends a run within about half a
  minute, in one line, rather than after MLflow's default of 7 retries with exponential back-off
  and 120 s timeouts (about 4 minutes per request): 2 retries, 1 s back-off, 10 s per request.
* ``PATH`` starts with this interpreter's folder, so that tools that plugins start by name
  (``kedro mlflow ui`` runs ``mlflow``) come from this environment even when it is not activated.

:func:`no_notebook_probe` wraps the opening of a run's MLflow run (:class:`fedclust.hooks.NotebookProbeHook`).

No MLflow or project imports here: this runs before MLflow loads (Kedro's own lookup of the project
folder is used; Kedro is already loaded where this runs).
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kedro.utils import find_kedro_project

#: (variable, value) set when the user has not set the variable
DEFAULTS = (
    ("MLFLOW_DISABLE_TELEMETRY", "true"),
    ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
    ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
    ("MLFLOW_HTTP_REQUEST_TIMEOUT", "10"),
)
SGC_RESUMPTION = "MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS"
PACKAGE = "fedclust"


def apply_defaults(environ=None) -> None:
    """Set fedclust's environment defaults (the module's docstring) where the user set nothing."""
    environ = os.environ if environ is None else environ
    for name, value in DEFAULTS:
        environ.setdefault(name, value)
    if "DATABRICKS_RUNTIME_VERSION" not in environ:  # on Databricks, left to MLflow
        environ.setdefault(SGC_RESUMPTION, "false")
    folder = os.path.dirname(sys.executable)
    if folder not in environ.get("PATH", "").split(os.pathsep):
        environ["PATH"] = os.pathsep.join([folder, environ.get("PATH", "")])


def project_package(start: Path) -> str | None:
    """The package name of the Kedro project that contains ``start`` (None outside a project)."""
    root = find_kedro_project(start)
    if root is None:
        return None
    try:
        meta = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return meta.get("tool", {}).get("kedro", {}).get("package_name")


def kedro_init() -> None:
    """The ``kedro.init`` entry point: the defaults, in fedclust's project only (another Kedro project
    that shares this environment keeps its own)."""
    if project_package(Path.cwd()) == PACKAGE:
        apply_defaults()


@contextmanager
def no_notebook_probe() -> Iterator[None]:
    """Within the block, MLflow's notebook probe reads "not a notebook" without importing IPython.

    When MLflow opens a run it asks whether it runs in a Jupyter notebook by importing IPython and
    asking for the running shell: a third of a second in every run, since kedro-viz installs
    IPython. A process that has not imported IPython cannot be running inside it, so for the block
    the name is marked as not importable (a ``None`` entry in ``sys.modules``, which Python documents
    to make ``import IPython`` raise ImportError); the entry goes at the end, so that code that later
    asks whether IPython is loaded (Ray does, through ``"IPython" in sys.modules``) or imports it
    finds the usual state. Where IPython is already loaded, nothing changes.
    """
    if "IPython" in sys.modules:
        yield
        return
    sys.modules["IPython"] = None
    try:
        yield
    finally:
        if "IPython" in sys.modules and sys.modules["IPython"] is None:
            del sys.modules["IPython"]
