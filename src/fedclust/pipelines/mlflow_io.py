"""Kedro datasets that write results to MLflow in one metric schema.

Single runs (a method pipeline) and grid cells (:mod:`fedclust.experiments` records) log the same
metric names, so that the MLflow UI shows them in one table with shared columns and charts:

* utility: ``ACC``, ``NMI``, ``ARI`` (data clustering), ``test_accuracy``, ``client_ACC``,
  ``client_NMI`` (clustered FL);
* privacy: ``epsilon`` (the accountant's epsilon, the figure that holds), ``epsilon_paper`` (the
  paper formula's claim, where the method has one), ``private`` (1 or 0) and ``delta``. A
  non-private run logs no ``epsilon`` metric (MLflow would store infinity as 1.8e308, which wrecks
  every chart it is on): its tag ``epsilon`` is ``inf`` and ``metrics.private = 0`` finds those runs.
  No metric is ever logged with a value that is not finite or above :data:`LARGEST`;
* cost: ``wall_time_s`` (the method's compute time, not the logging), ``uploaded_reals``, ``rounds``;
* per-round histories ``round.<key>`` (step = round); FedCAvg/FedCGds's relative objective change
  (their history ``eps``, no privacy figure) is ``round.rel_objective_change``.

The method is a tag (``tags.method``), never a prefix of a metric name.

:func:`cell_run_logger` logs every record of an experiment grid as a nested MLflow run under the
run that kedro-mlflow opened for the pipeline, as soon as its cell finishes, with the record's tags,
parameters, final metrics, per-round histories and ``metrics.json``/``privacy.json`` artifacts.
:class:`MlflowMethodRunDataset` logs the final metrics of a method pipeline and its
``metrics.json``/``privacy.json`` into the method's run (see :class:`fedclust.hooks.RunTagsHook`).
"""

from __future__ import annotations

import math
import shlex
import time
from pathlib import Path
from typing import Any

import mlflow
from kedro.io import AbstractDataset, DatasetError
from mlflow.entities import Metric

from fedclust.executors import CellStore
from fedclust.experiments import eps_label

#: the shared final-metric names (single runs and grid cells); others are logged as they are
#: the largest magnitude a logged metric may have (anything larger is an infinity in disguise)
LARGEST = 1e300
#: history keys logged under another name (FedC-MF's ``eps`` is a convergence figure, not a budget)
RENAMED = {"eps": "rel_objective_change"}

SCHEMA = (
    "ACC",
    "NMI",
    "ARI",
    "test_accuracy",
    "client_ACC",
    "client_NMI",
    "epsilon",
    "epsilon_paper",
    "private",
    "delta",
    "wall_time_s",
)


def _number(v) -> float | None:
    """``v`` as a float (``"inf"`` -> inf), or None when it is no number."""
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def schema_metrics(metrics: dict, privacy: dict | None = None) -> dict[str, float]:
    """Final metrics in the shared schema (module docstring).

    ``metrics`` is a record's or a metrics.json's numbers; ``privacy`` a privacy.json (single runs).
    The accounted epsilon is taken from ``privacy["epsilon_accountant"]``, else from the metrics'
    ``epsilon_accountant`` or ``epsilon``; missing or "inf" means not private (``epsilon = inf``).
    NaN values are dropped.
    """
    out: dict[str, float] = {}
    for k, v in (metrics or {}).items():
        x = _number(v)
        if k in ("epsilon_accountant", "epsilon") or x is None or math.isnan(x):
            continue
        out[k] = x
    privacy = privacy or {}
    eps = privacy.get("epsilon_accountant", (metrics or {}).get("epsilon_accountant", (metrics or {}).get("epsilon")))
    eps = _number(eps)
    eps = math.inf if eps is None or math.isnan(eps) else eps
    if math.isfinite(eps):
        out["epsilon"] = eps
    out["private"] = float(math.isfinite(eps))
    paper = _number(privacy.get("epsilon_paper", (metrics or {}).get("epsilon_paper")))
    if paper is not None and not math.isnan(paper):
        out["epsilon_paper"] = paper
    else:
        out.pop("epsilon_paper", None)
    if privacy.get("delta") is not None and math.isfinite(eps):
        out["delta"] = float(privacy["delta"])
    return out


def loggable(v) -> bool:
    """A value MLflow can chart: a finite number no larger than :data:`LARGEST` in magnitude."""
    x = _number(v)
    return x is not None and math.isfinite(x) and abs(x) <= LARGEST


def _log_metrics(metrics: dict[str, float]) -> None:
    """Log final metrics (step 0) to the active run; values that are not :func:`loggable` are left out."""

    metrics = {k: float(v) for k, v in (metrics or {}).items() if loggable(v)}
    if metrics:
        mlflow.log_metrics(metrics, step=0)


def _log_histories(history: dict) -> None:
    """Per-round histories of the active run, in batches (one SQL round trip per 1000 points)."""

    run_id = mlflow.active_run().info.run_id
    now = int(time.time() * 1000)
    batch = [
        Metric(f"round.{RENAMED.get(key, key)}", float(v), now, step)
        for key, hist in history.items()
        for step, v in enumerate(hist, 1)
        if loggable(v)
    ]
    client = mlflow.tracking.MlflowClient()
    for i in range(0, len(batch), 1000):
        client.log_batch(run_id, metrics=batch[i : i + 1000])


def _json_ready(d):
    if isinstance(d, dict):
        return {str(k): _json_ready(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_json_ready(v) for v in d]
    if isinstance(d, float) and not math.isfinite(d):
        return "inf" if d > 0 else ("-inf" if d < 0 else "nan")
    if isinstance(d, (str, int, float, bool)) or d is None:
        return d
    try:
        return float(d)
    except (TypeError, ValueError):
        return str(d)


def cell_privacy(rec: dict) -> dict:
    """The privacy.json of a grid cell: its own artifact when it has one, else what the record says."""
    arts = rec.get("artifacts") or {}
    if "privacy.json" in arts:
        return arts["privacy.json"]
    met, params, tags = rec.get("metrics") or {}, rec.get("params") or {}, rec.get("tags") or {}
    eps = _number(met.get("epsilon_accountant", met.get("epsilon")))
    return {
        "epsilon_target": tags.get("epsilon", "inf"),
        "epsilon_accountant": "inf" if eps is None or not math.isfinite(eps) else eps,
        "epsilon_paper": met.get("epsilon_paper"),
        "delta": params.get("delta"),
        "source": "the grid cell's record (fedclust.experiments); the cell's run tags say what ran",
    }


def _parent_tags() -> dict[str, str]:

    parent = mlflow.active_run()
    if parent is None or not hasattr(parent, "data"):
        return {}
    return {k: v for k, v in parent.data.tags.items() if not k.startswith("mlflow.")}


def log_cell_run(rec: dict, prefix: str = "", parent_tags: dict | None = None, extra_tags: dict | None = None) -> None:
    """Log one record (a grid cell) as a run nested under the active run (a top-level run when none
    is active): its tags (``kind = cell``), params, final metrics in the shared schema, per-round
    histories and ``metrics.json``/``privacy.json`` artifacts."""

    nested = mlflow.active_run() is not None
    parent_tags = _parent_tags() if parent_tags is None else parent_tags
    name = f"{prefix}{rec.get('name', '')}"
    with mlflow.start_run(run_name=name, nested=nested):
        tags = {k: v for k, v in parent_tags.items() if k in ("pipeline", "seed")}
        tags.update({k: str(v) for k, v in (rec.get("tags") or {}).items()})
        if "epsilon" in tags:  # one spelling everywhere: "4", "inf"
            eps = _number(tags["epsilon"])
            tags["epsilon"] = eps_label(eps) if eps is not None else tags["epsilon"]
        tags["kind"] = "cell"
        tags.update(extra_tags or {})
        mlflow.set_tags(tags)
        params = {k: str(v)[:500] for k, v in (rec.get("params") or {}).items()}
        if params:
            mlflow.log_params(params)
        not_applicable = tags.get("status") == "not applicable"
        if rec.get("metrics") or not not_applicable:
            _log_metrics(schema_metrics(rec.get("metrics") or {}, (rec.get("artifacts") or {}).get("privacy.json")))
        _log_histories(rec.get("history") or {})
        arts = dict(rec.get("artifacts") or {})
        if not not_applicable:
            arts.setdefault("metrics.json", rec.get("metrics") or {})
            arts.setdefault("privacy.json", cell_privacy(rec))
        for fname, content in arts.items():
            mlflow.log_dict(_json_ready(content), fname)


def cell_run_logger(prefix: str = ""):
    """``on_done(index, records, resumed)`` for :func:`fedclust.executors.run_cells`: every record of a
    finished cell becomes a nested MLflow run at once (so an interrupted grid keeps what finished in
    MLflow); a cell taken from the grid's store is tagged ``resumed = true``."""

    parent = _parent_tags()
    enabled = mlflow.active_run() is not None

    def on_done(index: int, records: list[dict], resumed: bool) -> None:
        if not enabled:  # tracking off (no run open for the pipeline): nothing to log
            return
        for rec in records:
            log_cell_run(rec, prefix, parent, {"resumed": "true"} if resumed else None)

    return on_done


class MlflowChildRunsDataset(AbstractDataset):
    """Save-only: one nested MLflow run per record (:func:`log_cell_run`). The grid pipelines log
    their cells as they finish instead (:func:`cell_run_logger`)."""

    def __init__(self, run_name_prefix: str = "", metadata: dict[str, Any] | None = None):
        self._prefix = run_name_prefix
        self.metadata = metadata

    def _save(self, records: list[dict]) -> None:
        parent = _parent_tags()
        for rec in records:
            log_cell_run(rec, self._prefix, parent)

    def _load(self):
        raise DatasetError("MlflowChildRunsDataset is save-only: read the runs with the MLflow client or UI")

    def _describe(self) -> dict[str, Any]:
        return {"run_name_prefix": self._prefix}


class CellStoreDataset(AbstractDataset):
    """Load-only: the finished cells of a grid on disk (:class:`fedclust.executors.CellStore`, JSON
    lines), which the grid's ``run_cells`` node appends to as cells finish and resumes from."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None):
        self._filepath = filepath
        self.metadata = metadata

    def _load(self):

        return CellStore(self._filepath)

    def _save(self, data) -> None:
        raise DatasetError("CellStoreDataset is load-only: the run_cells node appends to the store itself")

    def _exists(self) -> bool:
        return True

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}


class MlflowMethodRunDataset(AbstractDataset):
    """Save-only: a method's final metrics (schema above) and its JSON reports, in the active run.

    Saves ``{"metrics": {name: value}, "artifacts": {file name: JSON-ready dict}}`` (from
    :func:`fedclust.pipelines.evaluation.nodes.to_mlflow_metrics`); artifacts go under
    ``artifact_path`` (``fkm/metrics.json``). The active run is the method's own run: the pipeline's
    run, or in a multi-method run (the tour) the method's nested run opened by the hook.
    """

    def __init__(self, artifact_path: str = "", metadata: dict[str, Any] | None = None):
        self._artifact_path = artifact_path
        self.metadata = metadata

    def _save(self, data: dict) -> None:

        if mlflow.active_run() is None:  # tracking disabled or no run: nothing to log
            return
        _log_metrics(data.get("metrics") or {})
        for fname, content in (data.get("artifacts") or {}).items():
            path = f"{self._artifact_path}/{fname}" if self._artifact_path else fname
            mlflow.log_dict(_json_ready(content), path)

    def _load(self):
        raise DatasetError("MlflowMethodRunDataset is save-only: read the run with the MLflow client or UI")

    def _describe(self) -> dict[str, Any]:
        return {"artifact_path": self._artifact_path}


class MlflowRunSummaryDataset(AbstractDataset):
    """Save-only: ``{"metrics": {name: value}, "tags": {name: text}}`` into the active run (a grid's
    parent run: its best ACC per epsilon and its counts). Values that are not :func:`loggable` are
    left out."""

    def __init__(self, metadata: dict[str, Any] | None = None):
        self.metadata = metadata

    def _save(self, data: dict) -> None:

        if mlflow.active_run() is None:  # tracking disabled: nothing to log
            return
        _log_metrics(data.get("metrics") or {})
        tags = {k: str(v) for k, v in (data.get("tags") or {}).items()}
        if tags:
            mlflow.set_tags(tags)

    def _load(self):
        raise DatasetError("MlflowRunSummaryDataset is save-only: read the run with the MLflow client or UI")

    def _describe(self) -> dict[str, Any]:
        return {}


#: where ``make mlflow-ui`` serves the UI (its MLFLOW_PORT, and ui.port of conf/base/mlflow.yml)
LOCAL_UI = "http://127.0.0.1:5000"


def run_address(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """Where a person sees a run among the others: the experiment's runs view (the run's id after
    it) on the tracking server, or, for a local store, the command that starts the UI first
    (``make mlflow-ui`` for the project's own ``mlflow.db``) and the view it then serves."""
    view = f"#/experiments/{experiment_id}/runs"
    if tracking_uri.startswith(("http://", "https://")):
        return f"{tracking_uri.rstrip('/')}/{view} (run {run_id})"
    prefix = "sqlite:///"
    own = tracking_uri.startswith(prefix) and Path(tracking_uri[len(prefix) :]).resolve() == Path("mlflow.db").resolve()
    start = "make mlflow-ui" if own else f".venv/bin/mlflow ui --backend-store-uri {tracking_uri}"
    return f"{start}, then open {LOCAL_UI}/{view} (run {run_id})"


#: the file name of a run's config artifact (:func:`kedro_run_config`), named by its ``kedro_command``
RUN_CONFIG_ARTIFACT = "kedro_run_config.yml"


def _flat(d, prefix=""):
    for k, v in (d or {}).items():
        if isinstance(v, dict) and v:
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def needs_config_file(run_params: dict) -> bool:
    """Whether the run's ``--params`` cannot be written back as one re-runnable ``--params`` option:
    a list, an empty mapping, or a text with a comma, an equals sign or a quote or bracket (Kedro's
    ``--params`` splits on commas, and reads brackets and quotes as YAML)."""
    for _, v in _flat(run_params.get("runtime_params")):
        if isinstance(v, (list, tuple, dict)):
            return True
        if isinstance(v, str) and any(c in v for c in ",=[]{}'\""):
            return True
    return False


def _names(run_params: dict) -> list[str]:
    names = run_params.get("pipeline_names") or (
        [run_params["pipeline_name"]] if run_params.get("pipeline_name") else []
    )
    return [n for n in names if n != "__default__"]


_OPTIONS = (
    ("--env", "env", "env"),
    ("--tags", "tags", "tags"),
    ("--nodes", "node_names", "node_names"),
    ("--from-nodes", "from_nodes", "from_nodes"),
    ("--to-nodes", "to_nodes", "to_nodes"),
)


def kedro_run_config(run_params: dict) -> dict:
    """The run as a Kedro run config file (``kedro run --config=<file>``): ``{"run": {...}}`` with
    its pipelines, env, tags, nodes and its ``--params`` as one nested mapping (lists kept)."""
    run: dict[str, Any] = {}
    if _names(run_params):
        run["pipelines"] = ",".join(_names(run_params))
    for _, key, name in _OPTIONS:
        value = run_params.get(key)
        if value:
            run[name] = value if isinstance(value, str) else ",".join(value)
    if run_params.get("runtime_params"):
        run["params"] = run_params["runtime_params"]
    return {"run": run}


def kedro_command(run_params: dict, config_file: str | None = None) -> str:
    """The ``kedro run`` command line of a run, from Kedro's run parameters (pipelines, env, tags,
    nodes and ``--params``), for the ``kedro_command`` tag. With ``config_file`` (where
    :func:`needs_config_file`: the run's :func:`kedro_run_config`, saved under that name), the
    command reads that file: ``kedro run --config=<config_file>``."""
    if config_file:
        return " ".join(shlex.quote(c) for c in ("kedro", "run", f"--config={config_file}"))

    def text(v) -> str:
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(text(x) for x in v) + "]"
        return "null" if v is None else str(v)

    cmd = ["kedro", "run"]
    names = _names(run_params)
    for flag, value in (("--pipelines", names), *((f, run_params.get(k)) for f, k, _ in _OPTIONS)):
        if value:
            cmd.append(f"{flag}={value if isinstance(value, str) else ','.join(value)}")
    params = ",".join(f"{k}={text(v)}" for k, v in _flat(run_params.get("runtime_params")))
    if params:
        cmd.append(f"--params={params}")
    return " ".join(shlex.quote(c) for c in cmd)
