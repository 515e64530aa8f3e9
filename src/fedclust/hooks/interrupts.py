"""An interrupted ``kedro run`` ends its MLflow run as KILLED, and so, at the next run on the same
host, does a run whose process was killed outright."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import sys
import threading

import mlflow
from kedro.framework.hooks import hook_impl

from fedclust.hooks.state import OPEN_RUNS

logger = logging.getLogger(__name__)

#: tags of every pipeline run: the process that runs it and its host, so that a later run on the
#: same host can tell that a run left RUNNING belongs to a process that is gone (killed by SIGKILL)
PID_TAG, HOST_TAG = "fedclust.pid", "fedclust.host"

_ATEXIT_REGISTERED = False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    return True


def kill_dead_runs(client, experiment_ids: list[str], host: str | None = None, current: str | None = None) -> list[str]:
    """Mark KILLED the runs of ``experiment_ids`` left RUNNING by a process of this ``host`` (default:
    this machine) that no longer exists, and their nested runs still RUNNING; return their ids.
    Runs of other hosts, of live processes, and ``current`` are left alone."""
    host = host or socket.gethostname()
    found = client.search_runs(
        experiment_ids,
        filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'",
        max_results=1000,
    )
    killed = []
    for run in found:
        pid = run.data.tags.get(PID_TAG, "")
        if run.info.run_id == current or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        children = client.search_runs(
            experiment_ids,
            filter_string=f"attributes.status = 'RUNNING' and tags.mlflow.parentRunId = '{run.info.run_id}'",
        )
        for child in children:
            client.set_terminated(child.info.run_id, status="KILLED")
        client.set_terminated(run.info.run_id, status="KILLED")
        killed.append(run.info.run_id)
        logger.warning(
            "MLflow run %s was left RUNNING by process %s on %s, which is gone: marked KILLED (with %d nested run(s))",
            run.info.run_id,
            pid,
            host,
            len(children),
        )
    return killed


def _sigterm(signum, frame):
    marked = " (its MLflow run is marked KILLED)" if OPEN_RUNS else ""
    sys.stderr.write(f"fedclust: terminated by signal {signum}{marked}\n")
    raise SystemExit(128 + signum)


#: what Ctrl-C prints (and nothing else): finished grid cells are on disk, and a rerun resumes them
INTERRUPTED = "fedclust: interrupted; finished cells kept; rerun the same command to resume"


def kill_open_runs_quietly() -> list[str]:
    """Mark KILLED, now and without a log line, the MLflow runs this process's pipeline run left open
    (Ctrl-C: the command line says it in its one line); their ids."""
    if not OPEN_RUNS:
        return []
    killed = []
    try:
        while (active := mlflow.active_run()) is not None:
            killed.append(active.info.run_id)
            mlflow.end_run(status="KILLED")
    except Exception:  # never fail while stopping; the next run marks a run of a dead process KILLED
        pass
    OPEN_RUNS.clear()
    return killed


def _kill_open_runs() -> None:
    """At exit: a run this process opened and never closed was interrupted; mark it KILLED."""
    if not OPEN_RUNS:
        return
    try:
        while (active := mlflow.active_run()) is not None:
            mlflow.end_run(status="KILLED")
            logger.warning("MLflow run %s was interrupted: marked KILLED", active.info.run_id)
    except Exception as exc:  # never fail at exit
        logger.warning("could not mark the interrupted MLflow run as KILLED: %s", exc)


class InterruptHook:
    """An interrupted ``kedro run`` ends its MLflow run as KILLED.

    Without it, Ctrl-C (SIGINT) left the run to MLflow's exit handler, which marks it FINISHED, and
    SIGTERM killed the process with the run RUNNING forever. During a pipeline run, SIGTERM is turned
    into ``SystemExit(143)`` so that the process unwinds like after Ctrl-C, and an exit handler
    (registered after MLflow's, so it runs before it) marks a run that is still open as KILLED.
    Runs that fail with an exception are closed as FAILED by kedro-mlflow (``on_pipeline_error``).
    A process killed with SIGKILL can do none of this: every run is tagged with its process id and
    host, and the next run on the same host marks the runs of processes that are gone as KILLED
    (:func:`kill_dead_runs`).
    """

    def __init__(self):
        self._previous: dict = {}

    @hook_impl(trylast=True)
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        global _ATEXIT_REGISTERED
        OPEN_RUNS.clear()
        try:
            if (active := mlflow.active_run()) is not None:
                OPEN_RUNS.append(active.info.run_id)
                mlflow.set_tags({PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()})
                kill_dead_runs(mlflow.tracking.MlflowClient(), [active.info.experiment_id], current=active.info.run_id)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not check for MLflow runs left RUNNING by dead processes: %s", exc)
        if not _ATEXIT_REGISTERED:
            atexit.register(_kill_open_runs)
            _ATEXIT_REGISTERED = True
        if threading.current_thread() is threading.main_thread():
            self._previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _sigterm)}

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        OPEN_RUNS.clear()

    @hook_impl
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        self._restore()

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._restore()
