"""A user mistake or an environment fault ends ``kedro run`` with one line saying what to do, and
the MLflow run of a failed ``kedro run`` is FAILED."""

from __future__ import annotations

import logging
import os
import sys

import mlflow

from fedclust.errors import user_message
from fedclust.hooks.state import OPEN_RUNS

logger = logging.getLogger(__name__)

_previous_excepthook = None


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def fail_open_runs() -> None:
    """A run that ends with an error is FAILED in MLflow (MLflow's own exit handler would mark a run
    still open FINISHED, e.g. when a hook raised before kedro-mlflow could close it)."""
    try:
        while mlflow.active_run() is not None:
            mlflow.end_run(status="FAILED")
    except Exception as exc:  # never hide the error itself
        logger.warning("could not mark the failed MLflow run FAILED: %s", exc)
    OPEN_RUNS.clear()


def _excepthook(exc_type, exc, tb):
    show = _flag("FEDCLUST_TRACEBACK") or _flag("FEDCLUST_DEBUG")
    if not show and issubclass(exc_type, KeyboardInterrupt):
        marked = " (its MLflow run is marked KILLED)" if OPEN_RUNS else ""
        sys.stderr.write(f"fedclust: interrupted{marked}\n")
        return
    if not issubclass(exc_type, KeyboardInterrupt):
        fail_open_runs()
    message = None if show else user_message(exc)
    if message:
        sys.stderr.write(f"fedclust: error: {message}\n(set FEDCLUST_TRACEBACK=1 to see the traceback)\n")
        return
    (_previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)


def install_user_error_hook() -> None:
    """Print a user mistake or environment fault (:func:`fedclust.errors.user_message`: a bad
    parameter, an empty or missing data set, a read-only or full output folder) as one line saying
    what to do instead of a traceback, and mark the MLflow run still open FAILED.

    Installed once per process, on top of whatever hook is there (Kedro's rich tracebacks), which
    still shows every other error, and every error when ``FEDCLUST_TRACEBACK=1`` (or ``FEDCLUST_DEBUG=1``).
    """
    global _previous_excepthook
    if sys.excepthook is not _excepthook:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook
