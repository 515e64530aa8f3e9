"""A user's own CSV end to end: ``kedro run`` on tests/data/wine.csv (scikit-learn's Wine as CSV),
labelled and unlabelled, named by the file's stem or by ``dataset.label``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from fedclust.data.registry import prepare_dataset
from fedclust.partition import make_partition
from fedclust.pipelines.evaluation.nodes import evaluate_clustering
from fedclust.registry import REGISTRY

DATA = Path(__file__).resolve().parents[1] / "data"


def _kedro_run(project: Path, params: str) -> subprocess.CompletedProcess:
    kedro = Path(sys.executable).with_name("kedro")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    env.pop("KEDRO_LOGGING_CONFIG", None)
    return subprocess.run(
        [str(kedro), "run", "--pipelines=fed_dp_kmeans", f"--params={params}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _newest_metrics(project: Path) -> dict:
    folder = project / "data/08_reporting/fed_dp_kmeans/metrics.json"
    return json.loads((sorted(p for p in folder.iterdir() if p.is_dir())[-1] / "metrics.json").read_text())


@pytest.fixture(scope="module")
def project(tmp_path_factory, project_copy):
    root = project_copy(tmp_path_factory.mktemp("own_data"))
    shutil.copy(DATA / "wine.csv", root / "data/01_raw/mine.csv")
    shutil.copy(DATA / "wine_unlabelled.csv", root / "data/01_raw/mine_unlabelled.csv")
    return root


def test_a_labelled_csv_runs_and_scores_as_the_builtin_data_set(project):
    proc = _kedro_run(project, "dataset.name=csv,dataset.path=data/01_raw/mine.csv,dataset.options.label=label")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    metrics = _newest_metrics(project)
    # the same arrays as scikit-learn's Wine, so the same partition, run and ACC as the library on it
    ds = prepare_dataset("wine")
    part = make_partition("iid", X=ds.X, y=ds.y, n_clients=10, seed=0)
    spec = REGISTRY["fed_dp_kmeans"]
    cfg = spec.config_from({})
    noise = spec.calibrate({"epsilon": None, "delta": 1e-5}, cfg, ds, part)
    expected = evaluate_clustering(spec.run(ds, part, noise, cfg, 0), ds)
    assert metrics["ACC"] == expected["ACC"] and metrics["NMI"] == expected["NMI"]
    # named by the file's stem in the MLflow tags and the run name, never by "csv"
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    exp = next(e for e in client.search_experiments() if e.name == "fedclust")
    run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]
    assert run.data.tags["dataset"] == "mine"
    assert run.data.tags["scaling"] == "per_feature (the data's own statistics, outside epsilon)"
    assert run.data.tags["mlflow.runName"].startswith("fed_dp_kmeans · mine/iid")


def test_an_unlabelled_csv_runs_with_k_and_reports_the_objective_ratio(project):
    base = "dataset.name=csv,dataset.path=data/01_raw/mine_unlabelled.csv,dataset.label=survey"
    refused = _kedro_run(project, base)
    assert refused.returncode != 0
    assert (
        "has no labels" in refused.stdout + refused.stderr
        and "fed_dp_kmeans.train.k" in refused.stdout + refused.stderr
    )
    proc = _kedro_run(project, base + ",fed_dp_kmeans.train.k=3,privacy.epsilon=4")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    metrics = _newest_metrics(project)
    assert "ACC" not in metrics and "NMI" not in metrics
    # the run's centres can do no better than centralized k-means' restarts (up to their local optima)
    assert metrics["objective_ratio"] == pytest.approx(metrics["objective"] / metrics["objective_kmeans"])
    assert metrics["objective_ratio"] > 0.99
    assert "objective ratio" in proc.stdout and f"{metrics['objective_ratio']:.3f}" in proc.stdout
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    exp = next(e for e in client.search_experiments() if e.name == "fedclust")
    run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]
    assert run.data.tags["dataset"] == "survey" and "objective_ratio" in run.data.metrics


def test_a_private_run_says_whether_its_scaling_read_the_data(kedro_project, run_pipeline, read_versioned_json):
    # min-max scaling by the file's own ranges reads every client's data before the protocol: the
    # privacy report says so and that epsilon does not cover it; declared bounds read nothing
    shutil.copy(DATA / "wine.csv", kedro_project / "data/01_raw/mine.csv")
    data = {"name": "csv", "path": "data/01_raw/mine.csv", "options": {"label": "label"}}
    base = {"dataset": data, "privacy": {"epsilon": 1.0, "delta": 1e-5}}
    run_pipeline("fed_dp_kmeans", base)
    rep = read_versioned_json("data/08_reporting/fed_dp_kmeans/privacy.json")
    assert rep["preprocessing"]["scaling"] == "per_feature" and rep["preprocessing"]["reads"] == "data"
    assert rep["preprocessing"]["covered_by_epsilon"] is False
    assert any("epsilon does not cover them" in n for n in rep["notes"])
    run_pipeline("fed_dp_kmeans", {**base, "dataset": {**data, "options": {"label": "label", "bounds": [0, 2000]}}})
    rep = read_versioned_json("data/08_reporting/fed_dp_kmeans/privacy.json")
    assert rep["preprocessing"]["scaling"] == "declared" and rep["preprocessing"]["covered_by_epsilon"] is True
    assert not any("epsilon does not cover them" in n for n in rep["notes"])
