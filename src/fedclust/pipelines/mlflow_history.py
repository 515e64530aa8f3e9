"""A method's per-round histories written to MLflow in one batch.

kedro-mlflow's :class:`MlflowMetricsHistoryDataset` logs a history point by point, one
``log_metric`` call each: on the project's SQLite store every call is its own synced write (about
20 ms), so 100 rounds of three histories cost seconds. :class:`MlflowMetricsHistoryBatchDataset` is
that dataset with the same points (keys, values, steps) written by ``log_batch``, up to 1000 per
write. Its own module: the catalog loads it only for the runs that save a history.
"""

from __future__ import annotations

import time
from itertools import chain

from kedro.io import DatasetError
from kedro_mlflow.io.metrics import MlflowMetricsHistoryDataset
from mlflow import get_active_model_id
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from mlflow.tracking.metric_value_conversion_utils import convert_metric_value_to_float_if_possible

#: MLflow's limit on the metrics of one ``log_batch`` call
BATCH = 1000


class MlflowMetricsHistoryBatchDataset(MlflowMetricsHistoryDataset):
    """kedro-mlflow's metrics-history dataset (``{key: [{"step": s, "value": v}, ...]}``, optional
    ``prefix``, loading unchanged), saved with ``log_batch``. Without a run to log to it does what
    kedro-mlflow's does (``mlflow.log_metric``, which starts one)."""

    def _save(self, data) -> None:
        try:
            run_id = self.run_id
        except DatasetError:
            super()._save(data)
            return
        if not self._logging_activated:
            return
        now = int(time.time() * 1000)
        model_id = get_active_model_id()  # as log_metric does: None unless a model is set active
        points = chain.from_iterable(self._build_args_list_from_metric_item(k, v) for k, v in data.items())
        batch = [
            Metric(
                key,
                convert_metric_value_to_float_if_possible(value),
                now,
                0 if step is None else step,
                model_id=model_id,
            )
            for key, value, step in points
        ]
        client = MlflowClient()
        for i in range(0, len(batch), BATCH):
            client.log_batch(run_id, metrics=batch[i : i + BATCH])
