"""The MLflow store of a run: opened (created, migrated) once under a file lock, checked before the
run starts, and a run that lost its store marked FAILED, with the reason, once it can be written again.

* **One creation at a time.** MLflow creates the tables of a new SQLite store and runs its schema
  migrations when a client first opens it, without a lock between processes: two first runs in one
  project raced, and one died in the middle of a migration. :class:`StoreHook` opens the store, and
  lets kedro-mlflow create the experiment, while holding a file lock beside it (``mlflow.db.lock``,
  the ``filelock`` library: a lock the OS releases when its holder dies, even by SIGKILL, so it can
  never be left stale). The second run waits, then finds the store ready.
* **A short wait for a locked store.** MLflow makes every SQLite session wait up to 20 s for a lock
  held by another program, and a run retries many writes: a store locked mid-run held a run for
  minutes. Here SQLite waits :data:`SQLITE_BUSY_TIMEOUT_MS` (5 s, SQLite's own default in Python),
  plenty for the millisecond writes of other runs or of the MLflow UI.
* **A store that cannot be used** (locked by another program, an unknown or older schema, not a
  database, a tracking server that does not answer) stops the command before anything runs, with one
  line that says what is wrong and what to do (:func:`store_problem`; the command line prints it).
* **A run that loses its store** (locked, moved or read-only mid-run) cannot record its end. The
  command line (:func:`fail_runs`) retries for a few seconds, then leaves a note beside the store
  (``mlflow.db.failed.jsonl``) and a detached process that marks the run FAILED with the reason (tag
  ``fedclust.failure``) as soon as the store can be written again (:func:`watch`, for up to 30
  minutes); failing that, the next command that opens the store does it, before any check for runs
  of dead processes could call it KILLED. MLflow's own exit handler, which would mark it FINISHED,
  never sees it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from urllib.parse import unquote, urlparse

import mlflow
import sqlalchemy
from filelock import FileLock, Timeout
from kedro.framework.hooks import hook_impl

from fedclust.errors import FedclustError, user_message

logger = logging.getLogger(__name__)

#: the tag that says why fedclust marked a run FAILED
FAILURE_TAG = "fedclust.failure"
#: how long a run waits for another process that creates or migrates the store (a few seconds at most)
STORE_LOCK_WAIT_S = 45.0
#: how long a failed run retries marking its MLflow run FAILED before it leaves the note for later
MARK_RETRY_S = 6.0

#: how long an SQLite session of MLflow waits for a lock held by another connection
SQLITE_BUSY_TIMEOUT_MS = 5000

#: how long the process that waits for a lost store to come back keeps trying (30 minutes)
WATCH_S = 1800.0

#: the runs this process's pipeline run opened: kept after an error (kedro-mlflow forgets them when
#: it cannot end them), until the next pipeline run starts
STARTED_RUNS: list[str] = []


def _short_busy_timeout(conn, cursor, statement, parameters, context, executemany):
    """MLflow's ``PRAGMA busy_timeout = 20000`` (set on each session) with our shorter wait."""
    if statement.lstrip()[:19].upper() == "PRAGMA BUSY_TIMEOUT":
        statement = f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS};"
    return statement, parameters


sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", _short_busy_timeout, retval=True)


def sqlite_path(uri: str | None, project_path: str | os.PathLike | None = None) -> Path | None:
    """The file of an SQLite tracking URI (``sqlite:///mlflow.db`` is relative to the project)."""
    if not uri or not uri.startswith("sqlite:"):
        return None
    path = unquote(urlparse(uri).path)
    if uri.startswith("sqlite:////"):
        path = "/" + path.lstrip("/")
    else:
        path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:":
        return None
    p = Path(path)
    return p if p.is_absolute() else Path(project_path or Path.cwd()) / p


def tracking_uri_of(context) -> str | None:
    """The tracking URI kedro-mlflow is about to use: ``server.mlflow_tracking_uri`` of the run's
    ``mlflow.yml``, else ``MLFLOW_TRACKING_URI``."""
    try:
        patterns = context.config_loader.config_patterns
        if "mlflow" not in patterns:  # the pattern kedro-mlflow registers itself
            patterns["mlflow"] = ["mlflow*", "mlflow*/**", "**/mlflow*"]
        conf = context.config_loader["mlflow"] or {}
    except Exception:  # no mlflow.yml: kedro-mlflow's default, from the environment
        conf = {}
    uri = (conf.get("server") or {}).get("mlflow_tracking_uri")
    return uri or os.environ.get("MLFLOW_TRACKING_URI")


def _known_schema(revision: str) -> bool:
    """Whether this MLflow has a migration script for schema ``revision`` (one file per revision)."""
    versions = Path(mlflow.__file__).parent / "store" / "db_migrations" / "versions"
    return any(versions.glob(f"{revision}_*.py"))


def store_problem(exc: BaseException, uri: str, path: Path | None) -> str:
    """One line for an MLflow store that cannot be opened: what is wrong and what to do."""
    where = str(path) if path else uri
    setting = "mlflow_tracking_uri in conf/<env>/mlflow.yml (conf/local by default)"
    text = " ".join(str(exc).split())
    found = re.search(r"out-of-date database schema \(found version (\w+), but expected (\w+)\)", text)
    if found:
        have, want = found.groups()
        if not _known_schema(have):
            return (
                f"the MLflow store {where} was written by a newer MLflow (schema {have}, unknown to MLflow "
                f"{mlflow.__version__}): upgrade mlflow in this environment, or set {setting} to another store"
            )
        return (
            f"the MLflow store {where} has an older schema ({have}; this MLflow needs {want}): back it up, then "
            f"run `mlflow db upgrade {uri}` and run again (or set {setting} to a new store)"
        )
    if msg := user_message(exc):
        return msg.replace("the MLflow store ", f"the MLflow store {where} ", 1)
    text = re.sub(r"^\([\w.]+\) ", "", text.split(" [SQL:")[0])  # SQLAlchemy's wrapping, and its SQL
    if path is not None:
        return (
            f"the MLflow store {where} cannot be created or migrated ({type(exc).__name__}: {text[:160]}). "
            f"Move it aside (for example to {path.name}.bak) and run again to start a new store, or set {setting}"
        )
    return f"the MLflow store {where} cannot be opened ({type(exc).__name__}: {text[:160]}). Check {setting}"


def open_store(uri: str, path: Path | None) -> None:
    """Open the store as MLflow does (creating its tables and migrating a new one); a failure is a
    :class:`FedclustError` that says what to do."""
    try:
        mlflow.tracking.MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:
        raise FedclustError(store_problem(exc, uri, path)) from exc


# ---- runs that could not be marked FAILED -------------------------------------------------------


def _note_path(path: Path) -> Path:
    return path.with_name(path.name + ".failed.jsonl")


def _mark_failed(client, run_id: str, reason: str) -> bool:
    """Mark a run still RUNNING as FAILED with ``reason``; False for a run that ended already (a
    method's nested run that finished)."""
    if client.get_run(run_id).info.status != "RUNNING":
        return False
    client.set_tag(run_id, FAILURE_TAG, reason[:4000])
    client.set_terminated(run_id, status="FAILED")
    return True


def apply_notes(uri: str, path: Path) -> list[str]:
    """Mark FAILED the runs a note beside the store names (still RUNNING), with their reasons; the
    note goes once every run in it is marked. Returns the marked run ids."""
    note = _note_path(path)
    if not note.exists():
        return []
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    marked = []
    for line in note.read_text(encoding="utf-8").splitlines():
        with suppress(ValueError, TypeError, KeyError):
            entry = json.loads(line)
            if not _mark_failed(client, entry["run_id"], entry["reason"]):
                continue
            marked.append(entry["run_id"])
            logger.warning(
                "MLflow run %s lost its store while it ran: marked FAILED (%s)", entry["run_id"], entry["reason"]
            )
    note.unlink()
    return marked


def fail_runs(reason: str, retry_s: float = MARK_RETRY_S) -> str | None:
    """End the MLflow runs this process left open as FAILED, with ``reason`` as a tag; never FINISHED.

    The runs are taken off MLflow's stack first, so that its exit handler cannot call them FINISHED.
    When the store cannot be written, this retries for ``retry_s`` seconds, then writes a note beside
    an SQLite store that the next run applies (nothing where the store is gone: its folder is not
    made again, and the next run marks the run KILLED). Returns a line for the user when a run is left for
    later, else None."""
    ids = list(STARTED_RUNS)
    while (active := mlflow.active_run()) is not None:
        ids.append(active.info.run_id)
        with suppress(Exception):  # MLflow pops the run before it writes: the loop always ends
            mlflow.end_run(status="FAILED")
    ids = list(dict.fromkeys(ids))
    STARTED_RUNS.clear()
    if not ids:
        return None
    uri = mlflow.get_tracking_uri()
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    left = list(ids)
    deadline = time.monotonic() + retry_s
    while left:
        try:
            _mark_failed(client, left[0], reason)
            left.pop(0)
            continue
        except Exception:
            if time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    if not left:
        return None
    path = sqlite_path(uri)
    if path is not None and path.is_file():  # a store that is there but cannot be written (locked)
        with suppress(OSError):
            with FileLock(str(path) + ".lock", timeout=5), _note_path(path).open("a", encoding="utf-8") as fh:
                for run_id in left:
                    fh.write(json.dumps({"run_id": run_id, "reason": reason}) + "\n")
            _start_watcher(path)
            return (
                f"fedclust: the MLflow run {left[0]} is marked FAILED as soon as its store can be written again "
                "(or by the next run)"
            )
    return f"fedclust: the MLflow run {left[0]} could not be marked FAILED (the next run on this host marks it KILLED)"


def _start_watcher(path: Path) -> None:
    """A detached process that applies the note beside ``path`` as soon as the store is writable
    (:func:`watch`); it outlives this command, quietly, for at most :data:`WATCH_S` seconds."""
    with suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-m", "fedclust.hooks.store", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not stopped by the Ctrl-C of the terminal it came from
            cwd=path.parent,
        )


def watch(path: Path, until_s: float = WATCH_S, poll_s: float = 2.0) -> bool:
    """Apply the note beside the SQLite store ``path`` once the store can be written (every
    ``poll_s`` seconds, for at most ``until_s``); False when it never could (the next run will)."""
    uri = f"sqlite:///{path}"
    end = time.monotonic() + until_s
    while time.monotonic() < end and _note_path(path).exists():
        try:
            with FileLock(str(path) + ".lock", timeout=poll_s):  # the note, one process at a time
                apply_notes(uri, path)
            return True
        except Exception:  # still locked (or busy): try again
            time.sleep(poll_s)
    return not _note_path(path).exists()


class StoreHook:
    """Opens the run's MLflow store before kedro-mlflow does: created and migrated under a file lock
    beside an SQLite store, so that two first runs cannot race; a store that cannot be used stops the
    command with one line; runs that lost their store earlier are marked FAILED. Records the runs
    the pipeline run opens, for :func:`fail_runs`."""

    @hook_impl(wrapper=True, tryfirst=True)
    def after_context_created(self, context):
        uri = tracking_uri_of(context)
        path = sqlite_path(uri, context.project_path)
        if path is None:
            if uri and uri.startswith(("http://", "https://")):
                open_store(uri, None)  # an unreachable server: one line, within MLflow's short retries
            return (yield)
        if Path.cwd().resolve() != Path(context.project_path).resolve():
            uri = f"sqlite:///{path}"  # a relative store is the project's; else kept: MLflow caches stores by URI
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(path) + ".lock", timeout=STORE_LOCK_WAIT_S)
            lock.acquire()
        except Timeout as exc:
            raise FedclustError(
                f"the MLflow store {path} has been held by another fedclust command for {STORE_LOCK_WAIT_S:.0f} s "
                "(creating or migrating it): wait for that command to finish, and run again"
            ) from exc
        try:
            open_store(uri, path)
            result = yield  # kedro-mlflow: the tracking URI and the experiment, created once
            with suppress(Exception):  # never block a run for an old run's status
                apply_notes(uri, path)
            return result
        finally:
            lock.release()

    @hook_impl(trylast=True)  # after kedro-mlflow opened the run
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        STARTED_RUNS.clear()
        if (active := mlflow.active_run()) is not None:
            STARTED_RUNS.append(active.info.run_id)

    @hook_impl(wrapper=True)  # forgotten only once every hook (kedro-mlflow's end of the run) went well
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog):
        result = yield
        STARTED_RUNS.clear()
        return result


if __name__ == "__main__":  # the watcher that _start_watcher starts: python -m fedclust.hooks.store <mlflow.db>
    logging.disable(logging.CRITICAL)
    watch(Path(sys.argv[1]))
