"""The method pipelines, built from one template.

Every training pipeline named ``<method>`` has the same shape, in the namespace ``<method>``:

``calibrate`` (privacy parameters -> noise scales) -> ``train`` (dataset, partition, noise ->
result) -> ``evaluate`` (ACC/NMI/ARI -> metrics.json and MLflow) -> ``report_privacy``
(privacy.json and MLflow) -> ``report`` (per-round histories and plots to MLflow).

A method contributes only its ``calibrate`` and ``train`` node functions.
"""

from __future__ import annotations

from functools import partial, update_wrapper
from typing import Callable

from kedro.pipeline import Pipeline, node

from fedclust.pipelines.evaluation.nodes import evaluate_clustering, history_to_mlflow, to_mlflow_metrics
from fedclust.pipelines.privacy.nodes import report_privacy
from fedclust.pipelines.reporting.nodes import plot_centroids, plot_history, summarize_run


def run_timed(fn: Callable, *args, **kwargs):
    """Call a library ``run`` and record its wall time and rounds in ``result.info``."""
    import time

    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    result.info["wall_time_s"] = time.perf_counter() - t0
    if "rounds" in kwargs:
        result.info.setdefault("rounds", kwargs["rounds"])
    return result


def n_clusters(train: dict, dataset) -> int:
    """``train.k``, or the number of classes of the data when it is null."""
    return int(train.get("k") or dataset.n_classes)


def require_all_assigned(partition, method: str):
    if (partition.client < 0).any():
        raise ValueError(
            f"{method} clusters every sample, but the partition left {(partition.client < 0).sum()} samples "
            "without a client (shards with shards_per_label drops some): use another scheme or options"
        )


def _bind(func: Callable, **kwargs) -> Callable:
    bound = partial(func, **kwargs)
    update_wrapper(bound, func)
    return bound


def method_pipeline(method: str, calibrate: Callable, train: Callable, *, data: list[str], evaluate: Callable,
                    evaluate_inputs: list[str]) -> Pipeline:
    """The pipeline of one method in the namespace ``method``; ``data`` are the shared inputs
    (``dataset``, ``partition`` for data clustering; ``rotated_data`` for clustered FL), given to
    ``calibrate(privacy, train, *data)`` and ``train(*data, noise, train, seed)``."""
    return Pipeline(
        [
            node(calibrate, ["params:privacy", "params:train", *data], "noise", name="calibrate",
                 tags=["privacy", "calibration"]),
            node(train, [*data, "noise", "params:train", "params:seed"], "result", name="train", tags=["training"]),
            node(evaluate, evaluate_inputs, "metrics", name="evaluate", tags=["evaluation"]),
            node(_bind(report_privacy, method=method), ["result", "noise", "params:privacy"], "privacy",
                 name="report_privacy", tags=["privacy", "reporting"]),
            node(to_mlflow_metrics, ["metrics", "privacy"], "mlflow_metrics", name="log_metrics", tags=["reporting"]),
            node(history_to_mlflow, "result", "mlflow_history", name="log_history", tags=["reporting"]),
            # the split is named by the partition parameters, or by the rotated clients (clustered FL)
            node(_bind(plot_history, method=method),
                 ["result", "privacy", "params:dataset", "params:partition" if "partition" in data else data[0]],
                 "history_plot", name="plot_history", tags=["reporting"]),
            *(
                [node(_bind(plot_centroids, method=method), ["result", "dataset", "privacy", "params:partition"],
                      "centroids_plot", name="plot_centroids", tags=["reporting"])]
                if "dataset" in data else []
            ),
            # reads every reporting output back, so none hangs off the modular pipeline in Kedro-Viz
            node(_bind(summarize_run, method=method),
                 ["metrics", "privacy", "mlflow_metrics", "mlflow_history", "history_plot",
                  *(["centroids_plot"] if "dataset" in data else [])],
                 None, name="summarize", tags=["reporting"]),
        ],
        namespace=method,
        inputs=set(data),
        parameters={"params:privacy", "params:seed", "params:dataset"} | ({"params:partition"} if "partition" in data else set()),
    )


def clustering_pipeline(method: str, calibrate: Callable, train: Callable) -> Pipeline:
    """A federated data clustering method on the shared dataset and partition."""
    return method_pipeline(method, calibrate, train, data=["dataset", "partition"], evaluate=evaluate_clustering,
                           evaluate_inputs=["result", "dataset"])


def clustered_fl_pipeline(method: str, calibrate: Callable, train: Callable) -> Pipeline:
    """A clustered-FL method on the shared rotated clients."""
    from fedclust.pipelines.clustered_fl.nodes import evaluate_clustered

    return method_pipeline(method, calibrate, train, data=["rotated_data"], evaluate=evaluate_clustered,
                           evaluate_inputs=["result"])


def _fkm():
    from fedclust.pipelines.fkm.nodes import calibrate, train

    return clustering_pipeline("fkm", calibrate, train)


def _fedsc():
    from fedclust.pipelines.fedsc.nodes import calibrate, train

    return clustering_pipeline("fedsc", calibrate, train)


def _dp_fedc():
    from fedclust.pipelines.dp_fedc.nodes import calibrate, train

    return clustering_pipeline("dp_fedc", calibrate, train)


def _kmeans_baseline(method: str):
    def factory():
        from fedclust.pipelines.kmeans_baselines.nodes import nodes_for

        return clustering_pipeline(method, *nodes_for(method))

    return factory


def _fedc_mf(method: str):
    def factory():
        from fedclust.pipelines.fedc_mf.nodes import nodes_for

        return clustering_pipeline(method, *nodes_for(method))

    return factory


def _clustered_fl(method: str):
    def factory():
        from fedclust.pipelines.clustered_fl.methods import nodes_for

        return clustered_fl_pipeline(method, *nodes_for(method))

    return factory


#: name -> (pipeline factory, part of the default quick tour?)
METHOD_PIPELINES: dict[str, tuple[Callable[[], Pipeline], bool]] = {
    "fkm": (_fkm, True),
    "fedsc": (_fedsc, True),
    "dp_fedc": (_dp_fedc, True),
    "fzkm": (_kmeans_baseline("fzkm"), False),
    "dk_pp": (_kmeans_baseline("dk_pp"), False),
    "dkm": (_kmeans_baseline("dkm"), False),
    "fedc_avg": (_fedc_mf("fedc_avg"), True),
    "fedc_gds": (_fedc_mf("fedc_gds"), True),
}

def _rr_cluster():
    from fedclust.pipelines.clustered_fl.rr import calibrate, train

    return clustered_fl_pipeline("rr_cluster", calibrate, train)


#: clustered-FL methods: they run on the rotated clients of the shared rotation stage
CLUSTERED_FL_PIPELINES: dict[str, tuple[Callable[[], Pipeline], bool]] = {
    "ifca": (_clustered_fl("ifca"), True),
    "cfl_mgd": (_clustered_fl("cfl_mgd"), True),
    "fedavg": (_clustered_fl("fedavg"), True),
    "rr_cluster": (_rr_cluster, True),
}
