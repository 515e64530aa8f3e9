"""Parameters checked before anything runs, and the run's thread setting applied."""

from __future__ import annotations

import logging
from typing import Any

from kedro.config import OmegaConfigLoader
from kedro.framework.hooks import hook_impl

from fedclust.data.registry import NO_FILE_NAMES
from fedclust.params_check import ParameterError, raise_for_params
from fedclust.partition import check_scheme
from fedclust.registry import REGISTRY, method_problems
from fedclust.registry.helpers import WORK_LIMIT_DEFAULT, set_work_limit
from fedclust.registry.privacy import check_privacy_params
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
    privacy budget against each method's range of epsilon. It runs first among the
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
        try:
            params = catalog.load("parameters")
        except Exception:  # a catalog without parameters: nothing to check
            return
        if self._reference is not None:
            self._check(params, pipeline)
        compute = params.get("compute") or {}
        apply_thread_setting(compute.get("threads"))
        set_work_limit(compute.get("max_work", WORK_LIMIT_DEFAULT))

    def _check(self, params: dict, pipeline) -> None:
        raise_for_params(params, self._reference)
        used = {name for n in pipeline.nodes for name in n.inputs if name.startswith("params:")}
        try:
            if "params:privacy" in used:  # the budget every method calibrates to
                methods = [m for m in REGISTRY if f"params:{m}.train" in used] or [None]
                for method in methods:  # each method's range of epsilon (the message gives it)
                    check_privacy_params(params.get("privacy") or {}, method)
            if "params:dataset" in used:  # a key given but unused is a mistake, not something to skip
                ds = params.get("dataset") or {}
                if ds.get("path") is not None and ds.get("name") in NO_FILE_NAMES:
                    raise ValueError(
                        f"dataset.path = {ds['path']!r} is given, but dataset {ds['name']!r} reads "
                        "no file: remove dataset.path, or choose a data set read from files"
                    )
            if "params:partition" in used:  # the scheme and its option names (values: in the node)
                part = dict(params.get("partition") or {})
                extra = {k: v for k, v in part.items() if k not in ("scheme", "n_clients", "options")}
                check_scheme(part.get("scheme"), {**extra, **(part.get("options") or {})})
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        problems = method_problems(params, used)
        if problems:
            head = "invalid parameter" if len(problems) == 1 else f"{len(problems)} invalid parameters"
            raise ParameterError(f"{head}: " + "; ".join(problems))
