"""Project hooks: MLflow run tags and a one-line progress report per node (RunTagsHook); parameters
checked before anything runs, user errors shown as one line (ParamsCheckHook); interrupted runs
marked KILLED in MLflow (InterruptHook)."""

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
        # data clustering runs on `partition` (params `partition`); clustered FL on `rotated_data`
        # (the rotation split of params `clustered_fl.data`); the tour has both
        outputs = pipeline.all_outputs()
        splits = []
        if "partition" in outputs:
            splits.append((str(part.get("scheme", "")), str(part.get("n_clients", ""))))
        if "rotated_data" in outputs:
            rot = (params.get("clustered_fl", {}) or {}).get("data", {}) or {}
            splits.append(("rotation", str(rot.get("n_clients", ""))))
        if not splits:
            splits.append((str(part.get("scheme", "")), str(part.get("n_clients", ""))))
        self._tags = {
            "pipeline": self._pipeline_name,
            "method": ",".join(methods) if methods else self._pipeline_name,
            "dataset": str(ds.get("name", "")),
            "partition": ",".join(s for s, _ in splits),
            "n_clients": ",".join(n for _, n in splits),
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


class ParamsCheckHook:
    """Checks the run's parameters against ``conf/base`` before anything runs.

    Every key set in ``conf/<env>`` or with ``--params`` must exist in ``conf/base`` (a typo such as
    ``fkm.train.roundz`` is an error naming ``fkm.train.rounds``), values must have their default's
    type, and counts (``k``, ``rounds``, ``clients_per_round``, ``n_clients``) must be null or >= 1:
    see :mod:`fedclust.params_check`. It runs first among the ``before_pipeline_run`` hooks, so a bad
    parameter stops the run before kedro-mlflow opens a run and before the first node.
    """

    def __init__(self):
        self._reference: dict | None = None

    @hook_impl
    def after_context_created(self, context) -> None:
        install_user_error_hook()
        loader = context.config_loader
        try:
            from kedro.config import OmegaConfigLoader

            base = loader.base_env
            self._reference = OmegaConfigLoader(
                conf_source=str(loader.conf_source), base_env=base, default_run_env=base, env=base,
            )["parameters"]
        except Exception as exc:  # a custom config loader: skip the check rather than fail the run
            logger.warning("parameters not checked against conf/base: %s", exc)
            self._reference = None

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        if self._reference is None:
            return
        from fedclust.params_check import ParameterError, raise_for_params

        params = catalog.load("parameters")
        raise_for_params(params, self._reference)
        used = {name for n in pipeline.nodes for name in n.inputs if name.startswith("params:")}
        try:
            if "params:privacy" in used:  # the budget every method calibrates to
                from fedclust.pipelines.privacy.nodes import check_privacy_params

                check_privacy_params(params.get("privacy") or {})
            if "params:partition" in used:  # the scheme and its option names (values: in the node)
                from fedclust.partition import check_scheme

                part = dict(params.get("partition") or {})
                extra = {k: v for k, v in part.items() if k not in ("scheme", "n_clients", "options")}
                check_scheme(part.get("scheme"), {**extra, **(part.get("options") or {})})
        except ValueError as exc:
            raise ParameterError(str(exc)) from None


# ---- user errors and interruptions ----------------------------------------------------------------

#: user errors: printed as one line (no traceback) unless FEDCLUST_DEBUG=1
USER_ERRORS = (ValueError, FileNotFoundError)
_previous_excepthook = None


def _excepthook(exc_type, exc, tb):
    import os
    import sys

    debug = os.environ.get("FEDCLUST_DEBUG", "").strip().lower() not in ("", "0", "false", "no")
    if not debug and issubclass(exc_type, KeyboardInterrupt):
        marked = " (its MLflow run is marked KILLED)" if _OPEN_RUNS else ""
        sys.stderr.write(f"fedclust: interrupted{marked}\n")
        return
    if not debug and issubclass(exc_type, USER_ERRORS):
        message = " ".join(str(exc).split()) or exc_type.__name__
        sys.stderr.write(f"fedclust: error: {message}\n"
                         "(set FEDCLUST_DEBUG=1 to see the traceback)\n")
        return
    (_previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)


def install_user_error_hook() -> None:
    """Print a user error (bad parameter, missing file) as one line instead of a traceback.

    Installed once per process, on top of whatever hook is there (Kedro's rich tracebacks), which
    still shows every other error, and every error when ``FEDCLUST_DEBUG=1``.
    """
    import sys

    global _previous_excepthook
    if sys.excepthook is not _excepthook:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook


class InterruptHook:
    """An interrupted ``kedro run`` ends its MLflow run as KILLED.

    Without it, Ctrl-C (SIGINT) left the run to MLflow's exit handler, which marks it FINISHED, and
    SIGTERM killed the process with the run RUNNING forever. During a pipeline run, SIGTERM is turned
    into ``SystemExit(143)`` so that the process unwinds like after Ctrl-C, and an exit handler
    (registered after MLflow's, so it runs before it) marks a run that is still open as KILLED.
    Runs that fail with an exception are closed as FAILED by kedro-mlflow (``on_pipeline_error``).
    """

    def __init__(self):
        self._previous: dict = {}

    @hook_impl(trylast=True)
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        import atexit
        import signal
        import threading

        _OPEN_RUNS.clear()
        try:
            import mlflow

            if (active := mlflow.active_run()) is not None:
                _OPEN_RUNS.append(active.info.run_id)
        except Exception:
            pass
        if not _ATEXIT_REGISTERED:
            atexit.register(_kill_open_runs)
            globals()["_ATEXIT_REGISTERED"] = True
        if threading.current_thread() is threading.main_thread():
            self._previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _sigterm)}

    def _restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        _OPEN_RUNS.clear()

    @hook_impl
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        self._restore()

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._restore()


_ATEXIT_REGISTERED = False
#: the MLflow run of the pipeline run in progress (empty when none, or once it ended)
_OPEN_RUNS: list[str] = []


def _sigterm(signum, frame):
    import sys

    marked = " (its MLflow run is marked KILLED)" if _OPEN_RUNS else ""
    sys.stderr.write(f"fedclust: terminated by signal {signum}{marked}\n")
    raise SystemExit(128 + signum)


def _kill_open_runs() -> None:
    """At exit: a run this process opened and never closed was interrupted; mark it KILLED."""
    if not _OPEN_RUNS:
        return
    try:
        import mlflow

        while (active := mlflow.active_run()) is not None:
            mlflow.end_run(status="KILLED")
            logger.warning("MLflow run %s was interrupted: marked KILLED", active.info.run_id)
    except Exception as exc:  # never fail at exit
        logger.warning("could not mark the interrupted MLflow run as KILLED: %s", exc)
