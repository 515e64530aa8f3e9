"""Fixtures for the user-interface tests: a small benchmark run in a throw-away project copy.

Same approach as ``tests/pipelines/conftest.py`` (``pyproject.toml`` and ``conf/`` copied, an empty
``src/``, an absolute SQLite store in ``conf/local/mlflow.yml``), but module-scoped: one tiny
``benchmark`` run serves every test of a module (the notebook, the MLflow server, the browser).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Runs in seconds: one data set, one partition, no DP and one budget, one seed. Each half of the
# benchmark holds methods without a private variant, so the run has "not applicable" cells.
TINY_BENCHMARK = {
    "benchmark": {
        "config": {
            "datasets": ["iris"],
            "partitions": [{"scheme": "iid"}],
            "n_clients": 5,
            "epsilons": [None, 4.0],
            "seeds": 1,
            "rounds": 4,
            "methods": ["fkm", "fedc_gds", "kmeans"],
            "clustered_fl": {
                "datasets": ["digits"],
                "methods": ["fedavg", "rr_cluster"],
                "epsilons": [None, 8.0],
                "n_clients": 40,
                "participation": 0.5,
                "B": 1,
                "rounds": 5,
            },
        }
    }
}
TINY_METHODS = ("fkm", "fedc_gds", "kmeans", "fedavg", "rr_cluster")
# A single FKM run in the same store, on the benchmark's data at one of its budgets: the docs'
# filters must find it and the matching benchmark cell in one list, with shared metric columns.
TINY_SINGLE_RUN = {
    "dataset": {"name": "iris"},
    "partition": {"scheme": "iid", "n_clients": 5},
    "privacy": {"epsilon": 4.0},
    "fkm": {"train": {"rounds": 4}},
}


@pytest.fixture(scope="session")
def benchmark_methods() -> tuple[str, ...]:
    """The methods of ``TINY_BENCHMARK``."""
    return TINY_METHODS


@pytest.fixture(scope="module")
def benchmark_project(tmp_path_factory, project_copy) -> Path:
    """A project copy in which ``kedro run --pipeline=benchmark`` (tiny params) and one single
    ``fkm`` run have run."""
    import mlflow
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    project = project_copy(tmp_path_factory.mktemp("ui_project"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        bootstrap_project(project)
        with KedroSession.create(project_path=project, runtime_params=TINY_BENCHMARK) as session:
            session.run(pipeline_name="benchmark")
        with KedroSession.create(project_path=project, runtime_params=TINY_SINGLE_RUN) as session:
            session.run(pipeline_name="fkm")
        while mlflow.active_run() is not None:  # never leak a run into the next test
            mlflow.end_run()
    summary = project / "data" / "08_reporting" / "benchmark" / "summary.csv"
    assert summary.is_file(), "the benchmark run wrote no summary.csv"
    return project
