"""The clustered-FL pipelines: a shared rotation stage and one training pipeline per method."""

from __future__ import annotations

from typing import Callable

from kedro.pipeline import Pipeline, node

from fedclust.pipelines.clustered_fl.nodes import evaluate_clustered, history_to_mlflow, plot_history, rotate, rotation_report
from fedclust.pipelines.evaluation.nodes import to_mlflow_metrics
from fedclust.pipelines.methods import _bind
from fedclust.pipelines.privacy.nodes import report_privacy


def rotation_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(rotate, ["dataset", "params:data", "params:seed"], "rotated_data", name="rotate", tags=["partition"]),
            node(rotation_report, "rotated_data", "rotation_stats", name="report_rotation", tags=["partition", "reporting"]),
        ],
        namespace="clustered_fl",
        inputs={"dataset"},
        outputs={"rotated_data", "rotation_stats"},
        parameters={"params:seed"},
    )


def clustered_fl_pipeline(method: str, calibrate: Callable, train: Callable) -> Pipeline:
    return Pipeline(
        [
            node(calibrate, ["params:privacy", "params:train", "rotated_data"], "noise", name="calibrate",
                 tags=["privacy", "calibration"]),
            node(train, ["rotated_data", "noise", "params:train", "params:seed"], "result", name="train", tags=["training"]),
            node(evaluate_clustered, "result", "metrics", name="evaluate", tags=["evaluation"]),
            node(_bind(report_privacy, method=method), ["result", "noise", "params:privacy"], "privacy",
                 name="report_privacy", tags=["privacy", "reporting"]),
            node(to_mlflow_metrics, ["metrics", "privacy"], "mlflow_metrics", name="log_metrics", tags=["reporting"]),
            node(history_to_mlflow, "result", "mlflow_history", name="log_history", tags=["reporting"]),
            node(_bind(plot_history, method=method), "result", "history_plot", name="plot_history", tags=["reporting"]),
        ],
        namespace=method,
        inputs={"rotated_data"},
        parameters={"params:privacy", "params:seed"},
    )
