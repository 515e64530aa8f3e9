"""Project hooks: MLflow run tags and a one-line progress report per node."""

from __future__ import annotations

import logging
import time
from typing import Any

from kedro.framework.hooks import hook_impl

logger = logging.getLogger(__name__)


def _fmt_eps(eps) -> str:
    return "inf" if eps is None else str(eps)


class RunTagsHook:
    """Tags the active MLflow run (opened by kedro-mlflow) with what was run, on what."""

    def __init__(self):
        self._pipeline_name = "__default__"
        self._tags: dict[str, str] = {}
        self._tagged = False
        self._t0: dict[str, float] = {}

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        # Kedro >= 1.0 records the requested pipelines as a list under "pipeline_names"
        names = run_params.get("pipeline_names") or (
            [run_params["pipeline_name"]] if run_params.get("pipeline_name") else None)
        self._pipeline_name = ",".join(names) if names else "__default__"
        self._tagged = False
        try:
            params = catalog.load("parameters")
        except Exception:  # a catalog without parameters: nothing to tag
            params = {}
        ds = params.get("dataset", {}) or {}
        part = params.get("partition", {}) or {}
        priv = params.get("privacy", {}) or {}
        namespaces = sorted({n.namespace.split(".")[0] for n in pipeline.nodes if n.namespace})
        methods = [m for m in namespaces if m not in ("data_processing", "partitioning", "clustered_fl")]
        grids = [m for m in methods if m.endswith("_grid") or m == "benchmark"]
        if grids and len(grids) == len(methods):
            # a grid: every cell is a nested run with its own method/dataset/partition/epsilon tags;
            # the global dataset/partition/privacy parameters are not what it ran on
            self._tags = {"pipeline": self._pipeline_name, "method": ",".join(grids), "kind": "grid",
                          "seed": str(params.get("seed", ""))}
            return
        self._tags = {
            "pipeline": self._pipeline_name,
            "method": ",".join(methods) if methods else self._pipeline_name,
            "dataset": str(ds.get("name", "")),
            "partition": str(part.get("scheme", "")),
            "n_clients": str(part.get("n_clients", "")),
            "epsilon": _fmt_eps(priv.get("epsilon")),
            "seed": str(params.get("seed", "")),
        }
        if priv.get("epsilon") is not None:
            from fedclust.privacy.report import SCOPE_TAG

            self._tags["dp_scope"] = SCOPE_TAG

    def _tag_once(self) -> None:
        if self._tagged:
            return
        try:
            import mlflow

            if mlflow.active_run() is not None:
                mlflow.set_tags(self._tags)
                self._tagged = True
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not set MLflow tags: %s", exc)

    @hook_impl
    def before_node_run(self, node, catalog, inputs) -> None:
        self._tag_once()
        self._t0[node.name] = time.perf_counter()

    @hook_impl
    def after_node_run(self, node, catalog, inputs, outputs) -> None:
        dt = time.perf_counter() - self._t0.pop(node.name, time.perf_counter())
        logger.info("node %s finished in %.2f s", node.name, dt)
