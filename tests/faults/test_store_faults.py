"""Faults of the MLflow store and of the terminal: a store locked by another program (before and
during a run), a tracking server that does not answer, a store that cannot be migrated, two first
runs at once, Ctrl-C, and the MLflow UI of ``make mlflow-ui`` on a loaded machine.

Each fault ends within 60 s in at most five lines on stderr, the first ``fedclust: error: ...`` that
says what is wrong and what to do, with no traceback; a run that lost its store is FAILED (never
FINISHED), with the reason in its ``fedclust.failure`` tag.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from faultkit import KEDRO, TINY, Outcome

from fedclust.errors import user_message
from fedclust.hooks import FAILURE_TAG
from fedclust.hooks.interrupts import INTERRUPTED
from fedclust.hooks.store import apply_notes

ERROR = "fedclust: error: "
ROOT = Path(__file__).resolve().parents[2]


def _store_env(project, name: str, uri: str) -> str:
    """A Kedro environment ``conf/<name>`` whose tracking URI is ``uri``."""
    conf = project.root / "conf" / name
    conf.mkdir(exist_ok=True)
    text = (project.root / "conf" / "local" / "mlflow.yml").read_text()
    (conf / "mlflow.yml").write_text(text.replace(f"sqlite:///{project.store}", uri))
    return name


def _runs(db: Path) -> dict[str, tuple[str, dict]]:
    """run id -> (status, tags) of every run in an SQLite store, read without MLflow."""
    if not db.exists():
        return {}
    con = sqlite3.connect(db, timeout=30)
    try:
        status = dict(con.execute("select run_uuid, status from runs"))
        tags: dict[str, dict] = {r: {} for r in status}
        for run, key, value in con.execute("select run_uuid, key, value from tags"):
            tags.setdefault(run, {})[key] = value
    finally:
        con.close()
    return {r: (s, tags[r]) for r, s in status.items()}


def _kedro(project, *args, timeout=120) -> tuple[Outcome, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [KEDRO, "run", *args], cwd=project.root, env=project.env(), capture_output=True, text=True, timeout=timeout
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr, []), time.monotonic() - t0


def _one_error(outcome: Outcome, first: str) -> None:
    assert outcome.code != 0, outcome.out[-2000:]
    assert outcome.first_error.startswith(ERROR + first), outcome.err[-3000:]
    assert len(outcome.err_lines) <= 5, outcome.err
    assert "Traceback" not in outcome.err + outcome.out


def _locker(db: Path) -> subprocess.Popen:
    """Another program holding ``BEGIN EXCLUSIVE`` on ``db`` until it is stopped."""
    code = textwrap.dedent(f"""
        import sqlite3, sys, time
        con = sqlite3.connect({str(db)!r}, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        print("locked", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


# ---- the error lines, without a run -------------------------------------------------------------


def test_a_locked_store_and_an_unreachable_server_are_user_errors():
    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as exc:
            raise RuntimeError("the tracking store said no") from exc
    except RuntimeError as exc:
        assert user_message(exc).startswith("the MLflow store is locked by another program (database is locked)")

    class MlflowException(Exception):  # MLflow's error type, by its module
        __module__ = "mlflow.exceptions"

    refused = MlflowException(
        "API request to http://127.0.0.1:9/api/2.0/mlflow/experiments/search failed with exception "
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded (Caused by NewConnectionError("
        "'Failed to establish a new connection: [Errno 111] Connection refused'))"
    )
    assert user_message(refused).startswith(
        "cannot reach the MLflow tracking server at http://127.0.0.1:9 (connection refused): start it"
    )
    assert user_message(MlflowException("RESOURCE_DOES_NOT_EXIST: no run")) is None  # not a store fault


# ---- before a run -------------------------------------------------------------------------------


def test_a_store_locked_by_another_program_fails_in_one_line_within_a_minute(project):
    before = _runs(project.store)
    locker = _locker(project.store)
    try:
        outcome, took = _kedro(project, "--pipelines=fkm", f"--params={TINY}")
    finally:
        locker.kill()
        locker.wait()
    _one_error(outcome, "the MLflow store")
    assert "is locked by another program (database is locked): wait for it to finish" in outcome.first_error
    assert took < 60
    assert _runs(project.store) == before  # no run started


def test_an_unreachable_tracking_server_fails_in_one_line_within_a_minute(project):
    before = _runs(project.store)
    env = _store_env(project, "server_down", "http://127.0.0.1:9")
    outcome, took = _kedro(project, f"--env={env}", "--pipelines=fkm", f"--params={TINY}")
    _one_error(outcome, "cannot reach the MLflow tracking server at http://127.0.0.1:9 (connection refused)")
    assert "conf/<env>/mlflow.yml" in outcome.first_error
    assert took < 60  # MLflow's own retries would take about 4 minutes
    assert _runs(project.store) == before


def _newer_schema(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("update alembic_version set version_num = 'ffffffffffff'")
    con.commit()
    con.close()


def _half_made(db: Path) -> None:  # tables of an old schema, and a revision that does not fit them
    con = sqlite3.connect(db)
    con.execute("create table experiments (experiment_id integer primary key, name text)")
    con.execute("create table alembic_version (version_num varchar(32) not null)")
    con.execute("insert into alembic_version values ('451aebb31d03')")
    con.commit()
    con.close()


@pytest.mark.parametrize(
    "make, words",
    [
        (_newer_schema, "was written by a newer MLflow (schema ffffffffffff, unknown to MLflow"),
        (_half_made, "cannot be created or migrated (OperationalError: "),
    ],
    ids=["newer_schema", "half_made"],
)
def test_a_store_that_cannot_be_migrated_fails_in_one_line(project, tmp_path, make, words):
    db = tmp_path / "mlflow.db"
    if make is _newer_schema:
        db.write_bytes(project.store.read_bytes())
    make(db)
    before = db.read_bytes()
    env = _store_env(project, f"store_{make.__name__}", f"sqlite:///{db}")
    outcome, took = _kedro(project, f"--env={env}", "--pipelines=fkm", f"--params={TINY}")
    _one_error(outcome, f"the MLflow store {db} {words}")
    assert took < 60
    if make is _newer_schema:  # left as it was, for a newer MLflow (a half-made one has MLflow's new tables)
        assert db.read_bytes() == before


# ---- during a run -------------------------------------------------------------------------------


def test_a_store_locked_mid_run_fails_the_run_which_is_marked_failed_once_the_store_is_free_again(project, tmp_path):
    # the run writes to MLflow when its training ends (a few seconds of rounds): the lock is taken first
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "mlflow.db"
    env = _store_env(project, "locked_mid_run", f"sqlite:///{db}")
    first, _ = _kedro(project, f"--env={env}", "--pipelines=fkm", f"--params={TINY}")  # the store exists
    assert first.code == 0, first.err[-3000:]
    known = set(_runs(db))
    long = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=6000"
    proc = project.start(f"--env={env}", "--pipelines=fkm", f"--params={long}")
    locker = None
    try:
        deadline = time.monotonic() + 120
        while not [r for r, (s, _) in _runs(db).items() if r not in known and s == "RUNNING"]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.3)
        (stale,) = set(_runs(db)) - known
        time.sleep(1)
        locker = _locker(db)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        if locker is not None:
            locker.kill()
            locker.wait()
    outcome = Outcome(proc.returncode, out, err, [])
    _one_error(outcome, "the MLflow store is locked by another program (database is locked)")
    assert took < 60
    assert outcome.err_lines[-1] == (
        f"fedclust: the MLflow run {stale} is marked FAILED as soon as its store can be written again "
        "(or by the next run)"
    )
    # the lock is gone (the locker was stopped above): the run is marked at once, without another command
    deadline = time.monotonic() + 60
    while _runs(db)[stale][0] == "RUNNING":  # never FINISHED in between
        assert time.monotonic() < deadline, "the run was not marked FAILED after its store came back"
        time.sleep(0.5)
    status, tags = _runs(db)[stale]
    assert status == "FAILED"  # not KILLED: its process ended with an error, which the tag gives
    assert "database is locked" in tags[FAILURE_TAG]
    deadline = time.monotonic() + 10
    while (folder / "mlflow.db.failed.jsonl").exists():  # the note goes once applied
        assert time.monotonic() < deadline
        time.sleep(0.2)


@pytest.mark.slow  # a new MLflow store: about 5 s
def test_the_next_run_marks_failed_the_runs_a_note_names(tmp_path):
    import mlflow

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("fedclust")
    lost, finished = (client.create_run(exp).info.run_id for _ in range(2))
    client.set_terminated(finished, status="FINISHED")
    note = tmp_path / "mlflow.db.failed.jsonl"
    note.write_text(
        "".join(json.dumps({"run_id": r, "reason": "the store was locked"}) + "\n" for r in (lost, finished))
    )
    assert apply_notes(uri, db) == [lost]
    assert client.get_run(lost).info.status == "FAILED"
    assert client.get_run(lost).data.tags[FAILURE_TAG] == "the store was locked"
    assert client.get_run(finished).info.status == "FINISHED"  # a run that ended is left as it is
    assert FAILURE_TAG not in client.get_run(finished).data.tags
    assert not note.exists() and apply_notes(uri, db) == []


def test_two_first_benchmarks_at_once_share_the_store_and_the_cells(project, tmp_path):
    db = tmp_path / "fresh" / "mlflow.db"  # no store yet: both runs would create and migrate it
    env = _store_env(project, "fresh_store", f"sqlite:///{db}")
    config = tmp_path / "grid.yml"
    config.write_text(
        textwrap.dedent("""
        run:
          pipelines: benchmark
          params:
            benchmark:
              config:
                datasets: [iris]
                partitions: [{scheme: iid}]
                epsilons: [null]
                methods: [kmeans, fkm]
                seeds: 3
                n_clients: 5
                clustered_fl: null
    """)
    )
    cmd = [KEDRO, "run", f"--env={env}", f"--config={config}"]
    procs = [
        subprocess.Popen(cmd, cwd=project.root, env=project.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode()[-2000:] for _, err in outs]
    assert not any(b"Traceback" in err for _, err in outs)
    rows = [json.loads(line) for line in (project.root / "data/08_reporting/benchmark/cells.jsonl").open()]
    assert len(rows) == 3 and len({r["key"] for r in rows}) == 3  # each cell exactly once
    assert {s for s, _ in _runs(db).values()} == {"FINISHED"}  # both runs and their cells' nested runs


# ---- Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_prints_one_line_and_marks_the_run_killed(project):
    known = set(_runs(project.store))
    long = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=100000"
    proc = subprocess.Popen(
        [KEDRO, "run", "--pipelines=fkm", f"--params={long}"],
        cwd=project.root,
        env=project.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: Ctrl-C goes to every process of a terminal's group
    )
    try:
        deadline = time.monotonic() + 120
        while not [r for r, (s, _) in _runs(project.store).items() if r not in known and s == "RUNNING"]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.3)
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = set(_runs(project.store)) - known
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130
    assert [line for line in lines if "interrupt" in line.lower()] == [
        INTERRUPTED.replace("; finished", f" (MLflow run {run} marked KILLED); finished", 1)
    ]
    assert lines[-1].startswith("fedclust: interrupted")
    assert "Aborted!" not in err and "Traceback" not in err + out
    assert _runs(project.store)[run][0] == "KILLED"


# ---- make mlflow-ui -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except Exception:
        return 0


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree of Linux")
def test_make_mlflow_ui_serves_from_one_process_that_stays_up_under_load(project):
    psutil = pytest.importorskip("psutil")
    port = _free_port()
    venv = Path(sys.executable).parent.parent
    stamp = venv / ".fedclust-installed"
    # make's own recipe, in the project copy, on this interpreter's venv (-o: never reinstall it)
    make = ["make", "-s", "-f", str(ROOT / "Makefile"), "-o", str(stamp), "mlflow-ui"]
    ui = subprocess.Popen(
        [*make, f"VENV={venv}", f"STAMP={stamp}", f"MLFLOW_PORT={port}"],
        cwd=project.root,
        env=project.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    burners = []
    try:
        deadline = time.monotonic() + 120
        while _get(f"http://127.0.0.1:{port}/", timeout=2) != 200:
            assert ui.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)

        def servers():
            out = set()
            for p in psutil.Process(ui.pid).children(recursive=True):
                try:
                    cmd = " ".join(p.cmdline())
                except psutil.Error:
                    continue
                if "uvicorn" in cmd or "huey" in cmd or "gunicorn" in cmd or "_job_runner" in cmd:
                    out.add((p.pid, "huey" in cmd or "_job_runner" in cmd))
            return out

        first = servers()
        assert [job for _, job in first] == [False]  # one web server process, and no job runners
        # load: two busy processes (the machine has two cores) while the UI answers its API
        spin = "import time\nend = time.time() + 8\nwhile time.time() < end: pass"
        burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
        api = f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search?max_results=10"
        codes = []
        while any(b.poll() is None for b in burners):
            codes.append(_get(api))
            time.sleep(0.5)
        assert codes and set(codes) == {200}
        assert servers() == first  # the same process throughout: never restarted
    finally:
        for b in burners:
            if b.poll() is None:
                b.kill()
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGTERM)  # what Ctrl-C on make does: every process it started ends
            ui.wait(timeout=30)
