"""The method pipelines, built from one template and the method registry.

Every training pipeline named ``<method>`` has the same shape, in the namespace ``<method>``:

``calibrate`` (privacy parameters -> noise scales) -> ``train`` (dataset, partition, noise ->
result) -> ``evaluate`` (ACC/NMI/ARI -> metrics.json and MLflow) -> ``report_privacy``
(privacy.json and MLflow) -> ``report`` (per-round histories and plots to MLflow).

The ``calibrate`` and ``train`` nodes are generic: they validate ``<method>.train`` through the
method's config class (:data:`fedclust.registry.REGISTRY`) and call its ``calibrate`` / ``run``.
"""

from __future__ import annotations

from functools import partial, update_wrapper
from typing import Callable

from kedro.pipeline import Pipeline, node

from fedclust.pipelines.clustered_fl.nodes import evaluate_clustered
from fedclust.pipelines.evaluation.nodes import evaluate_clustering, history_to_mlflow, to_mlflow_metrics
from fedclust.pipelines.privacy.nodes import report_privacy
from fedclust.pipelines.reporting.nodes import plot_centroids, plot_history, summarize_run
from fedclust.registry import REGISTRY, MethodSpec
from fedclust.registry.helpers import n_clusters as _n_clusters
from fedclust.registry.helpers import require_all_assigned, run_timed  # noqa: F401  (kept importable here)
from fedclust.registry.privacy import check_delta_against_units
from fedclust.registry.spec import estimate_work, protected_units


def n_clusters(train: dict, dataset) -> int:
    """``train.k``, or the number of classes of the data when it is null."""
    return _n_clusters(train.get("k"), dataset)


def _bind(func: Callable, **kwargs) -> Callable:
    bound = partial(func, **kwargs)
    update_wrapper(bound, func)
    return bound


def node_functions(method: str) -> tuple[Callable, Callable]:
    """``(calibrate, train)`` node functions of ``method``: ``calibrate(privacy, train, *data)`` and
    ``train(*data, noise, train, seed)`` with ``train`` the ``<method>.train`` parameter dict."""
    spec: MethodSpec = REGISTRY[method]
    if spec.family == "clustering":

        def calibrate(privacy: dict, train: dict, dataset, partition) -> dict:
            if spec.private:  # delta below 1/n (n: the units protected), before any noise is calibrated
                check_delta_against_units(privacy, protected_units(spec, dataset, partition), spec.unit)
            return spec.calibrate(privacy, spec.config_from(train), dataset, partition)

        def train(dataset, partition, noise: dict, train: dict, seed: int):
            cfg = spec.config_from(train)
            estimate_work(spec, cfg, dataset, partition, private=bool(noise.get("private")))
            return spec.run(dataset, partition, noise, cfg, int(seed))
    else:

        def calibrate(privacy: dict, train: dict, rotated) -> dict:
            if spec.private:  # delta below 1/n (n: the units protected), before any noise is calibrated
                check_delta_against_units(privacy, protected_units(spec, rotated), spec.unit)
            return spec.calibrate(privacy, spec.config_from(train), rotated)

        def train(rotated, noise: dict, train: dict, seed: int):
            cfg = spec.config_from(train)
            estimate_work(spec, cfg, rotated, private=bool(noise.get("private")))
            return spec.run(rotated, noise, cfg, int(seed))

    for fn, what in ((calibrate, "calibrate"), (train, "train")):
        fn.__name__ = fn.__qualname__ = f"{method}_{what}"
        fn.__doc__ = f"{what} node of {method} (:data:`fedclust.registry.REGISTRY`)"
    return calibrate, train


def method_pipeline(
    method: str,
    calibrate: Callable,
    train: Callable,
    *,
    data: list[str],
    evaluate: Callable,
    evaluate_inputs: list[str],
) -> Pipeline:
    """The pipeline of one method in the namespace ``method``; ``data`` are the shared inputs
    (``dataset``, ``partition`` for data clustering; ``rotated_data`` for clustered FL), given to
    ``calibrate(privacy, train, *data)`` and ``train(*data, noise, train, seed)``."""
    return Pipeline(
        [
            node(
                calibrate,
                ["params:privacy", "params:train", *data],
                "noise",
                name="calibrate",
                tags=["privacy", "calibration"],
            ),
            node(train, [*data, "noise", "params:train", "params:seed"], "result", name="train", tags=["training"]),
            node(evaluate, evaluate_inputs, "metrics", name="evaluate", tags=["evaluation"]),
            node(
                _bind(report_privacy, method=method),
                {"result": "result", "calibration": "noise", "privacy": "params:privacy", "data": data[0]},
                "privacy",
                name="report_privacy",
                tags=["privacy", "reporting"],
            ),
            node(to_mlflow_metrics, ["metrics", "privacy"], "mlflow_metrics", name="log_metrics", tags=["reporting"]),
            node(history_to_mlflow, "result", "mlflow_history", name="log_history", tags=["reporting"]),
            # the split is named by the partition parameters, or by the rotated clients (clustered FL)
            node(
                _bind(plot_history, method=method),
                ["result", "privacy", "params:dataset", "params:partition" if "partition" in data else data[0]],
                "history_plot",
                name="plot_history",
                tags=["reporting"],
            ),
            *(
                [
                    node(
                        _bind(plot_centroids, method=method),
                        ["result", "dataset", "privacy", "params:partition"],
                        "centroids_plot",
                        name="plot_centroids",
                        tags=["reporting"],
                    )
                ]
                if "dataset" in data
                else []
            ),
            # reads every reporting output back, so none hangs off the modular pipeline in Kedro-Viz
            node(
                _bind(summarize_run, method=method),
                [
                    "metrics",
                    "privacy",
                    "mlflow_metrics",
                    "mlflow_history",
                    "history_plot",
                    *(["centroids_plot"] if "dataset" in data else []),
                ],
                None,
                name="summarize",
                tags=["reporting"],
            ),
        ],
        namespace=method,
        inputs=set(data),
        parameters={"params:privacy", "params:seed", "params:dataset"}
        | ({"params:partition"} if "partition" in data else set()),
    )


def clustering_pipeline(method: str, calibrate: Callable, train: Callable) -> Pipeline:
    """A federated data clustering method on the shared dataset and partition."""
    return method_pipeline(
        method,
        calibrate,
        train,
        data=["dataset", "partition"],
        evaluate=evaluate_clustering,
        evaluate_inputs=["result", "dataset"],
    )


def clustered_fl_pipeline(method: str, calibrate: Callable, train: Callable) -> Pipeline:
    """A clustered-FL method on the shared rotated clients."""

    return method_pipeline(
        method,
        calibrate,
        train,
        data=["rotated_data"],
        evaluate=evaluate_clustered,
        evaluate_inputs=["result", "rotated_data"],
    )


def create_pipeline(method: str) -> Pipeline:
    """The pipeline of a registered method."""
    spec = REGISTRY[method]
    build = clustering_pipeline if spec.family == "clustering" else clustered_fl_pipeline
    return build(method, *node_functions(method))


def _factory(method: str) -> Callable[[], Pipeline]:
    return lambda: create_pipeline(method)


#: name -> (pipeline factory, part of the default quick tour?); data clustering methods
METHOD_PIPELINES: dict[str, tuple[Callable[[], Pipeline], bool]] = {
    name: (_factory(name), spec.in_tour) for name, spec in REGISTRY.items() if spec.family == "clustering"
}

#: clustered-FL methods: they run on the rotated clients of the shared rotation stage
CLUSTERED_FL_PIPELINES: dict[str, tuple[Callable[[], Pipeline], bool]] = {
    name: (_factory(name), spec.in_tour) for name, spec in REGISTRY.items() if spec.family == "clustered_fl"
}
