"""Project hooks: MLflow run names and tags, one nested run per method in a multi-method run, the
method's effective settings as params, a progress bar and a final summary table (RunTagsHook, with
MethodRunsCloseHook); parameters checked before anything runs (ParamsCheckHook; the command line, fedclust.cli,
shows a user error in one line); interrupted runs marked KILLED in MLflow, and runs left RUNNING by a process killed on this host
marked KILLED by the next run (InterruptHook)."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from kedro.framework.hooks import hook_impl

from fedclust.registry import trust_model_of

logger = logging.getLogger(__name__)


def _trust_model(method: str, params: dict, privacy: dict) -> str:
    """The trust model of ``method`` in a run with these parameters (its MLflow tag)."""
    chosen = ((params.get(method) or {}).get("train") or {}).get("trust_model")
    return trust_model_of(method, chosen, privacy.get("epsilon") is not None)


def _fmt_eps(eps) -> str:
    """epsilon as every tag writes it: "4", "0.5", "inf" (:func:`fedclust.experiments.eps_label`)."""
    from fedclust.experiments import eps_label

    try:
        return eps_label(None if eps is None else float(eps))
    except (TypeError, ValueError):
        return str(eps)


def run_name(method: str, dataset: str, partition: str, eps: str, seed) -> str:
    """The MLflow run name of a method run: ``fkm · digits/iid · ε=4 · seed 0``."""
    return f"{method} · {dataset}/{partition} · ε={eps} · seed {seed}"


def _tag_value(v) -> str:
    """A run parameter as a readable tag: lists joined by commas, dicts as JSON, never a repr."""
    import json

    if isinstance(v, (list, tuple, set)):
        return ",".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, default=str)
    text = str(v)
    if text.startswith("<") and " object at 0x" in text:  # "<kedro.runner.X object at 0x...>" -> "X"
        return text[1:].split(" object at ", 1)[0].rsplit(".", 1)[-1]
    return text


#: kedro-mlflow tags the run with Kedro's run parameters; these are renamed (Kedro's session id is
#: not an MLflow run id) or rewritten without Python reprs
_RENAMED_TAGS = {"run_id": "kedro_session_id"}

#: the experiment tag by which the MLflow UI (3.x) chooses the experiment's view: the runs table of
#: model development rather than GenAI traces
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"

#: namespaces that are shared stages, not methods
_STAGES = ("data_processing", "partitioning", "clustered_fl")


class _MethodRuns:
    """State shared by the hooks: the nested MLflow run of each method of a multi-method run."""

    def __init__(self):
        self.enabled = False
        self.tags: dict[str, dict[str, str]] = {}  # method -> its run's tags
        self.names: dict[str, str] = {}
        self.run_ids: dict[str, str] = {}
        self.open: str | None = None  # the method whose nested run is active

    def close(self, status: str = "FINISHED") -> None:
        if self.open is None:
            return
        self.open = None
        try:
            import mlflow

            mlflow.end_run(status=status)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not end a method's MLflow run: %s", exc)


_METHOD_RUNS = _MethodRuns()


class RunTagsHook:
    """Names and tags the active MLflow run (opened by kedro-mlflow) with what was run, on what.

    * run names say what ran: ``fkm · digits/iid · ε=4 · seed 0`` (grid cells keep their names);
    * tags ``pipeline``, ``method``, ``dataset``, ``partition``, ``n_clients``, ``epsilon`` (written
      as in :func:`fedclust.experiments.eps_label`: ``4``, ``inf``) and ``seed``; Kedro's run
      parameters that kedro-mlflow copies to tags are written without Python reprs, and Kedro's
      session id is ``kedro_session_id`` (it is no MLflow run id);
    * a run of several methods (the tour) is one parent run with one nested run per method, so that
      each method's metrics share the names of single runs and grid cells
      (:mod:`fedclust.pipelines.mlflow_io`); the nodes of method ``m`` log into ``m``'s run;
    * the method's effective settings (``k``, ``rounds``, ``clip``, ``clients_per_round``, ...:
      the scalars of ``result.info``) are logged as params of its run after ``train``;
    * a progress bar over the nodes (on a terminal only) and, at the end, a summary table: method,
      ACC/NMI or test accuracy, epsilon, wall time, MLflow run id.
    """

    def __init__(self):
        self._pipeline_name = "__default__"
        self._tags: dict[str, str] = {}
        self._run_params: dict[str, Any] = {}
        self._name = ""
        self._tagged = False
        self._t0: dict[str, float] = {}
        self._summary: dict[str, dict] = {}
        self._parent_id: str | None = None
        self._progress = None
        self._rounds = None
        self._task = None
        self._grid_records: dict[str, list] = {}

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        # Kedro >= 1.0 records the requested pipelines as a list under "pipeline_names"
        names = run_params.get("pipeline_names") or (
            [run_params["pipeline_name"]] if run_params.get("pipeline_name") else None)
        self._pipeline_name = ",".join(names) if names else "__default__"
        self._run_params = dict(run_params)
        self._tagged = False
        self._summary = {}
        self._grid_records = {}
        self._parent_id = None
        _METHOD_RUNS.__init__()
        try:
            params = catalog.load("parameters")
        except Exception:  # a catalog without parameters: nothing to tag
            params = {}
        # the one place where a run's thread setting is applied (fedclust.threads; README "Threads")
        from fedclust.threads import apply_thread_setting

        try:
            apply_thread_setting((params.get("compute") or {}).get("threads"))
        except Exception:  # the MLflow run is already open and no on_pipeline_error follows: FAILED
            _end_active_runs("FAILED")
            raise
        ds = params.get("dataset", {}) or {}
        part = params.get("partition", {}) or {}
        priv = params.get("privacy", {}) or {}
        seed = str(params.get("seed", ""))
        eps = _fmt_eps(priv.get("epsilon"))
        namespaces = sorted({n.namespace.split(".")[0] for n in pipeline.nodes if n.namespace})
        methods = [m for m in namespaces if m not in _STAGES]
        grids = [m for m in methods if m.endswith("_grid") or m in ("benchmark", "privacy_audit")]
        self._stop_progress()
        if grids and len(grids) == len(methods):  # grids show a bar over their cells (run_cells)
            # a grid: every cell is a nested run with its own method/dataset/partition/epsilon tags;
            # the global dataset/partition/privacy parameters are not what it ran on
            self._tags = {"pipeline": self._pipeline_name, "method": ",".join(grids), "kind": "grid", "seed": seed}
            self._name = f"{self._pipeline_name} · grid · seed {seed}"
            return
        # data clustering runs on `partition` (params `partition`); clustered FL on `rotated_data`
        # (the rotation split of params `clustered_fl.data`); the tour has both
        outputs = pipeline.all_outputs()
        rot = (params.get("clustered_fl", {}) or {}).get("data", {}) or {}
        split_of = {"partition": (str(part.get("scheme", "")), str(part.get("n_clients", ""))),
                    "rotated_data": ("rotation", str(rot.get("n_clients", "")))}
        splits = [split_of[k] for k in ("partition", "rotated_data") if k in outputs] or [split_of["partition"]]
        self._start_progress(len(pipeline.nodes))
        self._tags = {
            "pipeline": self._pipeline_name,
            "method": ",".join(methods) if methods else self._pipeline_name,
            "kind": "method" if len(methods) <= 1 else "tour",
            "dataset": str(ds.get("name", "")),
            "partition": ",".join(s for s, _ in splits),
            "n_clients": ",".join(n for _, n in splits),
            "epsilon": eps,
            "seed": seed,
        }
        if priv.get("epsilon") is not None:
            from fedclust.privacy.report import SCOPE_TAG

            self._tags["dp_scope"] = SCOPE_TAG
        if len(methods) == 1:
            self._tags["trust_model"] = _trust_model(methods[0], params, priv)
        self._name = run_name(self._tags["method"], self._tags["dataset"], self._tags["partition"], eps, seed)
        if len(methods) > 1:
            # one nested run per method: the split of a method is the one its pipeline reads
            _METHOD_RUNS.enabled = True
            for m in methods:
                ins = {i for n in pipeline.nodes if n.namespace and n.namespace.split(".")[0] == m for i in n.inputs}
                scheme, n_clients = split_of["rotated_data"] if "rotated_data" in ins else split_of["partition"]
                tags = {**self._tags, "method": m, "kind": "method", "partition": scheme, "n_clients": n_clients,
                        "trust_model": _trust_model(m, params, priv)}
                _METHOD_RUNS.tags[m] = tags
                _METHOD_RUNS.names[m] = run_name(m, tags["dataset"], scheme, eps, seed)
            self._name = f"tour · {self._tags['dataset']}/{self._tags['partition']} · ε={eps} · seed {seed}"

    # ---- MLflow ----------------------------------------------------------------------------------

    def _tag_once(self) -> None:
        if self._tagged:
            return
        try:
            import mlflow

            active = mlflow.active_run()
            if active is None:
                return
            self._parent_id = active.info.run_id
            client = mlflow.tracking.MlflowClient()
            existing = client.get_run(self._parent_id).data.tags
            fixed = {}
            for key, value in self._run_params.items():
                if not value or key not in existing:
                    continue
                new_key = _RENAMED_TAGS.get(key, key)
                if new_key != key:
                    client.delete_tag(self._parent_id, key)
                fixed[new_key] = _tag_value(value)
            mlflow.set_tags({**fixed, **self._tags, "mlflow.runName": self._name})
            self._tagged = True
            # the UI opens the experiment on the runs table for model training, not the GenAI view
            exp_id = active.info.experiment_id
            if client.get_experiment(exp_id).tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not set MLflow tags: %s", exc)

    @staticmethod
    def _method_of(node) -> str | None:
        m = node.namespace.split(".")[0] if node.namespace else None
        return m if m in _METHOD_RUNS.tags else None

    @hook_impl(trylast=True)  # after kedro-mlflow has re-opened the pipeline's run for this node
    def before_node_run(self, node, catalog, inputs) -> None:
        self._tag_once()
        self._t0[node.name] = time.perf_counter()
        self._start_rounds(node)
        method = self._method_of(node) if _METHOD_RUNS.enabled else None
        if method is None or _METHOD_RUNS.open == method:
            return
        _METHOD_RUNS.close()
        try:
            import mlflow

            if mlflow.active_run() is None:
                return
            run = mlflow.start_run(run_id=_METHOD_RUNS.run_ids.get(method), nested=True,
                                   run_name=None if method in _METHOD_RUNS.run_ids else _METHOD_RUNS.names[method])
            _METHOD_RUNS.open = method
            if method not in _METHOD_RUNS.run_ids:
                _METHOD_RUNS.run_ids[method] = run.info.run_id
                mlflow.set_tags({**_METHOD_RUNS.tags[method], "mlflow.runName": _METHOD_RUNS.names[method]})
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not open the MLflow run of %s: %s", method, exc)

    def _run_id(self, method: str) -> str:
        return _METHOD_RUNS.run_ids.get(method) or self._parent_id or ""

    @hook_impl
    def after_node_run(self, node, catalog, inputs, outputs) -> None:
        dt = time.perf_counter() - self._t0.pop(node.name, time.perf_counter())
        logger.debug("node %s finished in %.2f s", node.name, dt)
        self._stop_rounds()
        if self._progress is not None:
            self._progress.update(self._task, advance=1, description=node.name)
        method = node.namespace.split(".")[0] if node.namespace else None
        if method is None or method in _STAGES:
            return
        for name, value in outputs.items():
            short = name.rsplit(".", 1)[-1]
            if short == "result" and hasattr(value, "info"):
                self._log_effective_settings(value)
                self._summary.setdefault(method, {})["wall_time_s"] = value.info.get("wall_time_s")
            elif short == "metrics" and isinstance(value, dict):
                self._summary.setdefault(method, {}).update(metrics=value)
            elif short == "privacy" and isinstance(value, dict):
                self._summary.setdefault(method, {}).update(privacy=value)
            elif short == "records" and isinstance(value, list):
                self._grid_records[method] = value

    @staticmethod
    def _log_effective_settings(result) -> None:
        """The method's settings as it ran (defaults resolved): scalars of ``result.info``, and k."""
        try:
            import mlflow

            if mlflow.active_run() is None:
                return
            info = {k: v for k, v in result.info.items()
                    if k not in ("wall_time_s",) and (v is None or isinstance(v, (bool, int, float, str)))}
            centroids = getattr(result, "centroids", None)
            if getattr(centroids, "shape", None) is not None and len(centroids.shape) == 2:
                info.setdefault("k", int(centroids.shape[0]))
            existing = mlflow.get_run(mlflow.active_run().info.run_id).data.params
            params = {k: str(v)[:500] for k, v in info.items() if k not in existing}
            if params:
                mlflow.log_params(params)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not log the method's effective settings: %s", exc)

    @hook_impl
    def on_node_error(self, error, node, catalog, inputs, is_async) -> None:
        self._stop_rounds()
        _METHOD_RUNS.close(status="FAILED")

    # ---- terminal --------------------------------------------------------------------------------

    def _start_progress(self, total: int) -> None:
        import sys

        self._stop_progress()
        if not sys.stderr.isatty():  # quiet in logs, pipes and tests
            return
        try:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._progress = Progress(TextColumn("[bold]{task.fields[unit]:>6}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                      TextColumn("{task.description}"), transient=True)
            self._task = self._progress.add_task("", total=total, unit="nodes")
            self._progress.start()
        except Exception:  # no rich: no bar
            self._progress = None

    def _start_rounds(self, node) -> None:
        """A second bar under the nodes' one, over the rounds of a training node, with an ETA: the
        library's round loops report through :mod:`fedclust.progress`."""
        if self._progress is None or "training" not in node.tags or self._rounds is not None:
            return
        from fedclust import progress

        bar, where = self._progress, node.namespace or node.name
        task = bar.add_task(where, total=None, unit="rounds")

        def update(label: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None, description=f"{where} · {label}")

        listening = progress.listening(update)
        listening.__enter__()
        self._rounds = (task, listening)

    def _stop_rounds(self) -> None:
        if self._rounds is None:
            return
        task, listening = self._rounds
        self._rounds = None
        listening.__exit__(None, None, None)
        if self._progress is not None:
            self._progress.remove_task(task)

    def _stop_progress(self) -> None:
        self._stop_rounds()
        if self._progress is not None:
            try:
                self._progress.stop()
            finally:
                self._progress = None

    def summary_rows(self) -> list[dict]:
        """One row per method (or grid) of the finished run, for the summary table."""
        rows = []
        for method, s in self._summary.items():
            met, priv = s.get("metrics") or {}, s.get("privacy") or {}
            if "ACC" in met:
                util = f"ACC {met['ACC']:.3f} · NMI {met.get('NMI', float('nan')):.3f}"
                if "ACC_chance" in met:
                    util += f" (chance {met['ACC_chance']:.3f}{', AT CHANCE' if met.get('at_chance') else ''})"
            elif "test_accuracy" in met:
                util = f"test acc {met['test_accuracy']:.3f}"
            else:
                continue
            wall = s.get("wall_time_s", met.get("wall_time_s"))
            eps = _fmt_eps(_eps_of(priv))
            if priv.get("trust_model") not in (None, "none"):
                eps = f"{eps} ({priv['trust_model']})"
            rows.append({"method": method, "result": util, "epsilon": eps,
                         "wall_time_s": "" if wall is None else f"{float(wall):.1f}", "run_id": self._run_id(method)})
        for grid, records in self._grid_records.items():
            wall = sum(float((r.get("metrics") or {}).get("wall_time_s", 0.0) or 0.0) for r in records)
            rows.append({"method": grid, "result": f"{len(records)} cells (summary in data/08_reporting/{grid})",
                         "epsilon": "per cell", "wall_time_s": f"{wall:.1f}", "run_id": self._parent_id or ""})
            if grid == "benchmark":
                # imported here: the benchmark module pulls in every method, which other runs never need
                from fedclust.grids.benchmark import best_per_epsilon

                for best in best_per_epsilon(records):
                    chance = "AT CHANCE" if best["at_chance"] else f"chance {best['ACC_chance']:.3f}"
                    tm = f" ({best['trust_model']})" if best["trust_model"] not in ("none", "n/a") else ""
                    rows.append({"method": f"  best on {best['dataset']}",
                                 "result": f"{best['method']} ACC {best['ACC']:.3f} ({chance})",
                                 "epsilon": f"{best['epsilon']}{tm}", "wall_time_s": "", "run_id": ""})
        return rows

    def _print_summary(self) -> None:
        rows = self.summary_rows()
        if not rows:
            return
        try:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=f"fedclust: {self._name}", title_justify="left")
            for col, just in (("method", "left"), ("result", "left"), ("ε", "right"), ("wall time (s)", "right"),
                              ("MLflow run id", "left")):
                table.add_column(col, justify=just, no_wrap=col == "MLflow run id")
            for r in rows:
                table.add_row(r["method"], r["result"], r["epsilon"], r["wall_time_s"], r["run_id"])
            Console(width=max(120, Console().width)).print(table)
        except Exception as exc:  # never fail a finished run for its summary
            logger.warning("could not print the summary: %s", exc)

    @hook_impl(tryfirst=True)  # before kedro-mlflow ends the pipeline's run
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        _METHOD_RUNS.close()
        self._stop_progress()
        self._print_summary()

    @hook_impl(tryfirst=True)
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        _METHOD_RUNS.close(status="FAILED")
        self._stop_progress()


def _end_active_runs(status: str) -> None:
    """End every MLflow run this process has open with ``status`` (never raises)."""
    try:
        import mlflow

        while mlflow.active_run() is not None:
            mlflow.end_run(status=status)
    except Exception as exc:  # tracking must never hide the error being raised
        logger.warning("could not mark the MLflow run %s: %s", status, exc)


class MethodRunsCloseHook:
    """Ends the nested run of the previous method before kedro-mlflow re-opens the pipeline's run for
    the next node (it runs first; :class:`RunTagsHook` opens the next method's run last)."""

    @hook_impl(tryfirst=True)
    def before_node_run(self, node, catalog, inputs) -> None:
        if not _METHOD_RUNS.enabled or _METHOD_RUNS.open is None:
            return
        method = node.namespace.split(".")[0] if node.namespace else None
        if method != _METHOD_RUNS.open:
            _METHOD_RUNS.close()


def _eps_of(privacy: dict):
    eps = privacy.get("epsilon_accountant")
    return None if eps in (None, "inf") else eps


class ParamsCheckHook:
    """Checks the run's parameters against ``conf/base`` before anything runs.

    Every key set in ``conf/<env>`` or with ``--params`` must exist in ``conf/base`` (a typo such as
    ``fkm.train.roundz`` is an error naming ``fkm.train.rounds``), values must have their default's
    type, and counts (``k``, ``rounds``, ``clients_per_round``, ``n_clients``) must be null or >= 1:
    see :mod:`fedclust.params_check`. Then every selected method's ``<method>.train`` group is
    validated through its config class (:data:`fedclust.registry.REGISTRY`: kinds, bounds, choices,
    checks between keys, and RR-Cluster's ``B <= q M / k`` against ``clustered_fl.data``). It runs first among the ``before_pipeline_run`` hooks, so a bad
    parameter stops the run before kedro-mlflow opens a run and before the first node.
    """

    def __init__(self):
        self._reference: dict | None = None

    @hook_impl
    def after_context_created(self, context) -> None:
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

                from fedclust.registry import REGISTRY

                methods = [m for m in REGISTRY if f"params:{m}.train" in used] or [None]
                for method in methods:  # each method's range of epsilon (the message gives it)
                    check_privacy_params(params.get("privacy") or {}, method)
            if "params:dataset" in used:  # a key given but unused is a mistake, not something to skip
                from fedclust.data.registry import NO_FILE_NAMES

                ds = params.get("dataset") or {}
                if ds.get("path") is not None and ds.get("name") in NO_FILE_NAMES:
                    raise ValueError(f"dataset.path = {ds['path']!r} is given, but dataset {ds['name']!r} reads "
                                     "no file: remove dataset.path, or choose a data set read from files")
            if "params:partition" in used:  # the scheme and its option names (values: in the node)
                from fedclust.partition import check_scheme

                part = dict(params.get("partition") or {})
                extra = {k: v for k, v in part.items() if k not in ("scheme", "n_clients", "options")}
                check_scheme(part.get("scheme"), {**extra, **(part.get("options") or {})})
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        from fedclust.params_check import method_problems

        problems = method_problems(params, used)
        if problems:
            head = "invalid parameter" if len(problems) == 1 else f"{len(problems)} invalid parameters"
            raise ParameterError(f"{head}: " + "; ".join(problems))


# ---- interruptions -------------------------------------------------------------------------------


class InterruptHook:
    """An interrupted ``kedro run`` ends its MLflow run as KILLED.

    Without it, Ctrl-C (SIGINT) left the run to MLflow's exit handler, which marks it FINISHED, and
    SIGTERM killed the process with the run RUNNING forever. During a pipeline run, SIGTERM is turned
    into ``SystemExit(143)`` so that the process unwinds like after Ctrl-C, and an exit handler
    (registered after MLflow's, so it runs before it) marks a run that is still open as KILLED.
    Runs that fail with an exception are closed as FAILED by kedro-mlflow (``on_pipeline_error``).
    A process killed with SIGKILL can do none of this: every run is tagged with its process id and
    host, and the next run on the same host marks the runs of processes that are gone as KILLED
    (:func:`kill_dead_runs`).
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
                mlflow.set_tags({PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()})
                kill_dead_runs(mlflow.tracking.MlflowClient(), [active.info.experiment_id],
                               current=active.info.run_id)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not check for MLflow runs left RUNNING by dead processes: %s", exc)
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


#: tags of every pipeline run: the process that runs it and its host, so that a later run on the
#: same host can tell that a run left RUNNING belongs to a process that is gone (killed by SIGKILL)
PID_TAG, HOST_TAG = "fedclust.pid", "fedclust.host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    return True


def kill_dead_runs(client, experiment_ids: list[str], host: str | None = None, current: str | None = None) -> list[str]:
    """Mark KILLED the runs of ``experiment_ids`` left RUNNING by a process of this ``host`` (default:
    this machine) that no longer exists, and their nested runs still RUNNING; return their ids.
    Runs of other hosts, of live processes, and ``current`` are left alone."""
    host = host or socket.gethostname()
    found = client.search_runs(experiment_ids, filter_string=f"attributes.status = 'RUNNING' and "
                                                             f"tags.`{HOST_TAG}` = '{host}'", max_results=1000)
    killed = []
    for run in found:
        pid = run.data.tags.get(PID_TAG, "")
        if run.info.run_id == current or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        children = client.search_runs(experiment_ids, filter_string=f"attributes.status = 'RUNNING' and "
                                                                    f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        for child in children:
            client.set_terminated(child.info.run_id, status="KILLED")
        client.set_terminated(run.info.run_id, status="KILLED")
        killed.append(run.info.run_id)
        logger.warning("MLflow run %s was left RUNNING by process %s on %s, which is gone: marked KILLED "
                       "(with %d nested run(s))", run.info.run_id, pid, host, len(children))
    return killed


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


def install_fast_exit() -> None:
    """End a finished ``kedro run`` process without the interpreter's slow teardown.

    When ``kedro run`` ends, Python's finalisation of the modules a run imports (MLflow, scikit-learn,
    the BigQuery client that kedro-datasets pulls in, ...) takes about 1.3 s on a 2-core machine:
    a fifth of a small run. In the CLI process of ``kedro run`` only, the LAST ``sys.exit(code)`` (the
    one in Kedro's ``KedroCLI.main``, after its ``after_command_run`` CLI hooks) joins the remaining
    non-daemon threads, runs every ``atexit`` handler (MLflow, logging, ours), flushes the standard
    streams and leaves with ``os._exit(code)``: same exit code and side effects, no module teardown.
    Any other ``sys.exit`` (click's own, one inside a node) raises ``SystemExit`` as usual. Sessions
    inside another process (tests, notebooks) are not affected; ``FEDCLUST_SLOW_EXIT=1`` turns it off."""
    import os
    import sys

    argv = sys.argv
    if not argv or os.path.basename(argv[0]) not in ("kedro", "kedro.exe") or "run" not in argv[1:2]:
        return
    if os.environ.get("FEDCLUST_SLOW_EXIT"):
        return
    plain_exit = sys.exit

    def fast_exit(code=0):
        caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
        if not caller.endswith("kedro/framework/cli/cli.py"):
            return plain_exit(code)
        import atexit
        import threading

        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:  # sys.exit("message"): printed, status 1
            print(code, file=sys.stderr)
            status = 1
        try:
            threading._shutdown()  # what the interpreter does first at exit: join non-daemon threads
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # never lose the exit status: fall back to the normal exit
            plain_exit(code)
        os._exit(status)

    sys.exit = fast_exit
