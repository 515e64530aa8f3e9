"""Kedro datasets that write grid results to MLflow.

:class:`MlflowChildRunsDataset` logs every record of an experiment grid
(:mod:`fedclust.experiments`) as a nested MLflow run under the run that kedro-mlflow opened for
the pipeline, with the record's tags, parameters, final metrics and per-round histories, so that
the MLflow UI's compare view and search (``tags.method = 'dp_fedc'``) work cell by cell. A record's
optional ``artifacts`` (file name -> JSON-ready dict) are logged as artifacts of its run.
"""

from __future__ import annotations

import math
from typing import Any

from kedro.io import AbstractDataset, DatasetError


def _finite(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _log_histories(history: dict) -> None:
    """Per-round histories of the active run, in batches (one SQL round trip per 1000 points)."""
    import time

    import mlflow
    from mlflow.entities import Metric

    run_id = mlflow.active_run().info.run_id
    now = int(time.time() * 1000)
    batch = [
        Metric(f"round.{key}", float(v), now, step)
        for key, hist in history.items()
        for step, v in enumerate(hist, 1)
        if _finite(v)
    ]
    client = mlflow.tracking.MlflowClient()
    for i in range(0, len(batch), 1000):
        client.log_batch(run_id, metrics=batch[i : i + 1000])


class MlflowChildRunsDataset(AbstractDataset):
    """Save-only: one nested MLflow run per record."""

    def __init__(self, run_name_prefix: str = "", metadata: dict[str, Any] | None = None):
        self._prefix = run_name_prefix
        self.metadata = metadata

    def _save(self, records: list[dict]) -> None:
        import mlflow

        parent = mlflow.active_run()
        parent_tags = {}
        if parent is not None:
            parent_tags = {k: v for k, v in parent.data.tags.items() if not k.startswith("mlflow.")} if hasattr(parent, "data") else {}
        for rec in records:
            name = f"{self._prefix}{rec.get('name', '')}"
            with mlflow.start_run(run_name=name, nested=parent is not None):
                tags = {k: v for k, v in parent_tags.items() if k in ("pipeline", "seed")}
                tags.update({k: str(v) for k, v in (rec.get("tags") or {}).items()})
                mlflow.set_tags(tags)
                params = {k: str(v)[:500] for k, v in (rec.get("params") or {}).items()}
                if params:
                    mlflow.log_params(params)
                metrics = {k: float(v) for k, v in (rec.get("metrics") or {}).items() if _finite(v)}
                if metrics:
                    mlflow.log_metrics(metrics)
                _log_histories(rec.get("history") or {})
                for fname, content in (rec.get("artifacts") or {}).items():
                    mlflow.log_dict(content, fname)

    def _load(self):
        raise DatasetError("MlflowChildRunsDataset is save-only: read the runs with the MLflow client or UI")

    def _describe(self) -> dict[str, Any]:
        return {"run_name_prefix": self._prefix}
