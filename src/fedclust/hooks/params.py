"""Parameters checked before anything runs, and the run's thread setting applied."""

from __future__ import annotations

import logging
from typing import Any

from kedro.config import OmegaConfigLoader
from kedro.framework.hooks import hook_impl

from fedclust.threads import apply_thread_setting

logger = logging.getLogger(__name__)


class ParamsCheckHook:
    """Checks the run's parameters against ``conf/base`` before anything runs.

    Every key set in ``conf/<env>`` or with ``--params`` must exist in ``conf/base`` (a typo such as
    ``fkm.train.roundz`` is an error naming ``fkm.train.rounds``), values must have their default's
    type, and counts (``k``, ``rounds``, ``clients_per_round``, ``n_clients``) must be null or >= 1:
    see :mod:`fedclust.params_check`. Then every selected method's ``<method>.train`` group is
    validated through its config class (:data:`fedclust.registry.REGISTRY`: kinds, bounds, choices,
    checks between keys, and RR-Cluster's ``B <= q M / k`` against ``clustered_fl.data``), and the
    privacy budget against each method's range of epsilon. Last come the limits
    (:func:`fedclust.registry.check_limits`): a data set that cannot fit in memory, or a method whose
    work estimate (every loop bound included) exceeds ``compute.max_work``, is refused before it is
    built. It runs first among the
    ``before_pipeline_run`` hooks, so a bad parameter stops the run before kedro-mlflow opens a run
    and before the first node. Last, it applies ``compute.threads`` (:mod:`fedclust.threads`: the
    one place where a run's thread setting is applied).
    """

    def __init__(self):
        self._reference: dict | None = None

    @hook_impl
    def after_context_created(self, context) -> None:
        loader = context.config_loader
        try:
            base = loader.base_env
            self._reference = OmegaConfigLoader(
                conf_source=str(loader.conf_source),
                base_env=base,
                default_run_env=base,
                env=base,
            )["parameters"]
        except Exception as exc:  # a custom config loader: skip the check rather than fail the run
            logger.warning("parameters not checked against conf/base: %s", exc)
            self._reference = None

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        # here: the method registry (with scikit-learn's metrics, about half a second) loads when a run
        # needs it, not when Kedro imports the project's settings for every command (kedro --version)
        from fedclust.registry.helpers import WORK_LIMIT_DEFAULT, set_work_limit

        try:
            params = catalog.load("parameters")
        except Exception:  # a catalog without parameters: nothing to check
            return
        if self._reference is not None:
            self._check(params, pipeline)
        else:  # unchecked parameters: still the run's own work limit
            set_work_limit((params.get("compute") or {}).get("max_work", WORK_LIMIT_DEFAULT))
        apply_thread_setting((params.get("compute") or {}).get("threads"))

    def _check(self, params: dict, pipeline) -> None:
        # here: the method registry (with scikit-learn's metrics, about half a second) loads when a run
        # needs it, not when Kedro imports the project's settings for every command (kedro --version)
        from fedclust.registry.checks import check_run_params

        used = {name for n in pipeline.nodes for name in n.inputs if name.startswith("params:")}
        check_run_params(params, self._reference, used)
