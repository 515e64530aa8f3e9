"""Runs left RUNNING by a process killed on this host are marked KILLED by the next run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from fedclust.hooks import HOST_TAG, PID_TAG, kill_dead_runs


@pytest.fixture
def client(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    yield MlflowClient(uri)
    mlflow.set_tracking_uri(None)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_runs_of_dead_processes_on_this_host_are_marked_killed(client):
    exp = client.create_experiment("fedclust")
    host = socket.gethostname()

    def run(pid, on=host, parent=None):
        tags = {PID_TAG: str(pid), HOST_TAG: on}
        if parent:
            tags["mlflow.parentRunId"] = parent
        return client.create_run(exp, tags=tags).info.run_id

    dead = run(_dead_pid())
    nested = client.create_run(exp, tags={"mlflow.parentRunId": dead}).info.run_id  # a cell of the dead run
    alive = run(os.getpid())
    elsewhere = run(_dead_pid(), on="another-host")
    finished = run(_dead_pid())
    client.set_terminated(finished, status="FINISHED")

    assert kill_dead_runs(client, [exp]) == [dead]
    status = {r: client.get_run(r).info.status for r in (dead, nested, alive, elsewhere, finished)}
    assert status == {dead: "KILLED", nested: "KILLED", alive: "RUNNING", elsewhere: "RUNNING", finished: "FINISHED"}
    assert kill_dead_runs(client, [exp]) == []  # nothing left to mark
