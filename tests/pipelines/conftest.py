"""Run pipelines through a real KedroSession in a throw-away copy of the project.

The copy holds ``pyproject.toml`` and ``conf/``; the package itself is the installed one. Runs
write their data, ``mlflow.db`` and ``mlruns/`` inside the copy, never into the checkout.
"""

from __future__ import annotations

import json

import mlflow
import pytest


@pytest.fixture()
def kedro_project(tmp_path, project_copy, monkeypatch):
    project = project_copy(tmp_path)
    monkeypatch.chdir(project)
    yield project
    import mlflow

    while mlflow.active_run() is not None:  # never leak a run into the next test
        mlflow.end_run()


@pytest.fixture()
def run_pipeline(kedro_project):
    """``run_pipeline(name, params)`` runs one registered pipeline in the project copy."""
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    def _run(pipeline: str, params: dict):
        bootstrap_project(kedro_project)
        with KedroSession.create(project_path=kedro_project, runtime_params=params) as session:
            return session.run(pipeline_name=pipeline)

    return _run


@pytest.fixture()
def mlflow_runs(kedro_project):
    """``mlflow_runs()`` -> (client, runs of the fedclust experiment, newest first)."""
    import mlflow

    def _runs():
        client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{kedro_project / 'mlflow.db'}")
        exps = [e for e in client.search_experiments() if e.name == "fedclust"]
        assert exps, "no fedclust experiment in the MLflow store"
        return client, client.search_runs([exps[0].experiment_id], order_by=["attributes.start_time DESC"])

    return _runs


@pytest.fixture()
def read_versioned_json(kedro_project):
    """Load the newest version of a versioned JSON dataset, e.g. data/08_reporting/fkm/metrics.json."""

    def _read(relpath: str) -> dict:
        folder = kedro_project / relpath
        versions = sorted(p for p in folder.iterdir() if p.is_dir())
        assert versions, f"no version written under {folder}"
        return json.loads((versions[-1] / folder.name).read_text())

    return _read


@pytest.fixture()
def fresh_mlflow_store(tmp_path, monkeypatch):
    """The URI of an empty SQLite MLflow store in ``tmp_path``, set as the tracking URI with no
    experiment chosen; afterwards every run left open is ended and the tracking URI reset."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    # an experiment chosen by an earlier test of this process names an id this fresh store lacks
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    yield uri
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(None)
