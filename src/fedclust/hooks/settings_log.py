"""Each method's effective settings (its defaults resolved) as params of its MLflow run."""

from __future__ import annotations

import logging

import mlflow
from kedro.framework.hooks import hook_impl

from fedclust.hooks.state import method_of

logger = logging.getLogger(__name__)


def log_effective_settings(result) -> None:
    """The scalars of ``result.info`` (``k``, ``rounds``, ``clip``, ``clients_per_round``, ...) and
    ``k``, as params of the active run; params the run already has are kept."""
    try:
        if mlflow.active_run() is None:
            return
        info = {
            k: v
            for k, v in result.info.items()
            if k not in ("wall_time_s",) and (v is None or isinstance(v, (bool, int, float, str)))
        }
        centroids = getattr(result, "centroids", None)
        if getattr(centroids, "shape", None) is not None and len(centroids.shape) == 2:
            info.setdefault("k", int(centroids.shape[0]))
        existing = mlflow.get_run(mlflow.active_run().info.run_id).data.params
        params = {k: str(v)[:500] for k, v in info.items() if k not in existing}
        if params:
            mlflow.log_params(params)
    except Exception as exc:  # tracking must never break a run
        logger.warning("could not log the method's effective settings: %s", exc)


class EffectiveSettingsHook:
    """After a method's ``train`` node, logs the settings it ran with (:func:`log_effective_settings`)."""

    @hook_impl
    def after_node_run(self, node, catalog, inputs, outputs) -> None:
        if method_of(node) is None:
            return
        for name, value in outputs.items():
            if name.rsplit(".", 1)[-1] == "result" and hasattr(value, "info"):
                log_effective_settings(value)
