"""Per-round histories written in one batch: the same MLflow points as kedro-mlflow's dataset writes."""

from __future__ import annotations

import mlflow
import pytest
from kedro_mlflow.io.metrics import MlflowMetricsHistoryDataset
from mlflow.tracking import MlflowClient

from fedclust.pipelines import mlflow_history
from fedclust.pipelines.mlflow_history import MlflowMetricsHistoryBatchDataset

HISTORY = {
    "round.objective": [{"step": s, "value": 3.0 / s} for s in range(1, 8)],
    "round.ACC": [{"step": s, "value": 0.1 * s} for s in range(1, 8)],
    "final": {"step": 0, "value": 0.5},
}


@pytest.fixture
def client(fresh_mlflow_store):
    return MlflowClient(fresh_mlflow_store)


def _points(client, run_id) -> dict:
    keys = client.get_run(run_id).data.metrics
    return {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in keys}


@pytest.mark.parametrize("prefix", [None, "fkm"])
def test_batch_writes_the_points_kedro_mlflow_writes(client, monkeypatch, prefix):
    written = {}
    for name, cls in (("kedro_mlflow", MlflowMetricsHistoryDataset), ("batch", MlflowMetricsHistoryBatchDataset)):
        with mlflow.start_run() as run:
            cls(prefix=prefix).save(HISTORY)
        written[name] = _points(client, run.info.run_id)
    assert written["batch"] == written["kedro_mlflow"]
    assert len(written["batch"][f"{prefix}.round.ACC" if prefix else "round.ACC"]) == 7


def test_large_histories_go_in_batches_of_mlflows_limit(client, monkeypatch):
    monkeypatch.setattr(mlflow_history, "BATCH", 5)  # 15 points: three writes
    calls = []
    real = MlflowClient.log_batch
    monkeypatch.setattr(
        MlflowClient, "log_batch", lambda self, run_id, **kw: calls.append(kw) or real(self, run_id, **kw)
    )
    with mlflow.start_run() as run:
        MlflowMetricsHistoryBatchDataset().save(HISTORY)
    assert [len(c["metrics"]) for c in calls] == [5, 5, 5]
    assert sum(len(v) for v in _points(client, run.info.run_id).values()) == 15


def test_switched_off_logging_writes_nothing(client):
    with mlflow.start_run() as run:
        ds = MlflowMetricsHistoryBatchDataset()
        ds._logging_activated = False  # kedro-mlflow's switch for pipelines it does not track
        ds.save(HISTORY)
    assert client.get_run(run.info.run_id).data.metrics == {}
