"""MLflow run names and tags, and one nested run per method in a run of several methods.

* run names say what ran: ``fkm · digits/iid · ε=4 · seed 0`` (grid cells keep their names);
* tags ``pipeline``, ``method``, ``scaling`` (the data's scaling and whether it read the data,
  :func:`fedclust.data.registry.planned_scaling`), ``dataset`` (its display name,
  :func:`fedclust.data.registry.dataset_label`: ``dataset.label``, else a file's stem), ``partition``, ``n_clients``, ``epsilon`` (written as
  :func:`fedclust.experiments.eps_label` writes it: ``4``, ``inf``), ``seed`` and ``trust_model``;
  Kedro's run parameters that kedro-mlflow copies to tags are written without Python reprs, and
  Kedro's session id is ``kedro_session_id`` (it is no MLflow run id); ``kedro_command`` re-runs
  the run: where its ``--params`` hold lists it reads the run's config file, saved as the run's
  artifact ``kedro_run_config.yml`` (:func:`fedclust.pipelines.mlflow_io.kedro_run_config`);
* a run of several methods (the tour) is one parent run with one nested run per method, so that each
  method's metrics have the names of single runs and grid cells (:mod:`fedclust.pipelines.mlflow_io`);
  the nodes of method ``m`` log into ``m``'s run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import mlflow
from kedro.framework.hooks import hook_impl

from fedclust.data.registry import DATASET_NAMES, dataset_label, planned_scaling
from fedclust.experiments import eps_label
from fedclust.hooks.state import RUN, method_of, methods_of
from fedclust.pipelines.mlflow_io import RUN_CONFIG_ARTIFACT, kedro_command, kedro_run_config, needs_config_file
from fedclust.privacy.report import SCOPE_TAG

logger = logging.getLogger(__name__)

#: kedro-mlflow tags the run with Kedro's run parameters; these are renamed (Kedro's session id is
#: not an MLflow run id) or rewritten without Python reprs
_RENAMED_TAGS = {"run_id": "kedro_session_id"}

#: the ``scaling`` tag's words for what a scaling reads
SCALING_READS_TAG = {"public": "public numbers", "data": "the data's own statistics, outside epsilon"}

#: the experiment tag by which the MLflow UI (3.x) chooses the experiment's view: the runs table of
#: model development rather than GenAI traces
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


def fmt_eps(eps) -> str:
    """epsilon as every tag writes it: "4", "0.5", "inf"."""
    try:
        return eps_label(None if eps is None else float(eps))
    except (TypeError, ValueError):
        return str(eps)


def run_name(method: str, dataset: str, partition: str, eps: str, seed) -> str:
    """The MLflow run name of a method run: ``fkm · digits/iid · ε=4 · seed 0``."""
    return f"{method} · {dataset}/{partition} · ε={eps} · seed {seed}"


def tag_value(v) -> str:
    """A run parameter as a readable tag: lists joined by commas, dicts as JSON, never a repr."""
    if isinstance(v, (list, tuple, set)):
        return ",".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, default=str)
    text = str(v)
    if text.startswith("<") and " object at 0x" in text:  # "<kedro.runner.X object at 0x...>" -> "X"
        return text[1:].split(" object at ", 1)[0].rsplit(".", 1)[-1]
    return text


def _server_data(method: str, params: dict) -> str | None:
    """Which server data a method with a server sample uses, in words (None for the others)."""
    # here: the method registry (with scikit-learn's metrics, about half a second) loads when a run
    # needs it, not when Kedro imports the project's settings for every command (kedro --version)
    from fedclust.registry import REGISTRY
    from fedclust.registry.clustering import describe_server_data

    spec = REGISTRY.get(method)
    if spec is None or "server_data" not in {f.name for f in dataclasses.fields(spec.config)}:
        return None
    try:
        cfg = spec.config_from((params.get(method) or {}).get("train") or {})
    except ValueError:  # a bad setting stops the run at its own check, with its own message
        return None
    return describe_server_data(cfg)


def _trust_model(method: str, params: dict, privacy: dict) -> str:
    """The trust model of ``method`` in a run with these parameters (its MLflow tag)."""
    # here: the method registry (with scikit-learn's metrics, about half a second) loads when a run
    # needs it, not when Kedro imports the project's settings for every command (kedro --version)
    from fedclust.registry import trust_model_of

    chosen = ((params.get(method) or {}).get("train") or {}).get("trust_model")
    return trust_model_of(method, chosen, privacy.get("epsilon") is not None)


def _backend_tags(method: str, params: dict) -> dict[str, str]:
    """Where ``method``'s sums were computed (its ``backend`` parameter, ``simulation`` for the methods
    without one) and by which aggregation: Flower's SecAgg+, or simulated in this process."""
    backend = str(((params.get(method) or {}).get("train") or {}).get("backend") or "simulation")
    return {"backend": backend, "aggregation_protocol": "SecAgg+" if backend == "flower" else "simulated"}


def _pipeline_label(run_params: dict) -> str:
    # Kedro >= 1.0 records the requested pipelines as a list under "pipeline_names"
    names = run_params.get("pipeline_names") or (
        [run_params["pipeline_name"]] if run_params.get("pipeline_name") else None
    )
    return ",".join(names) if names else "__default__"


def _plan(pipeline_label: str, pipeline, params: dict) -> None:
    """Fill :data:`RUN` with the names and tags of this pipeline run (and of its methods' runs)."""
    ds = params.get("dataset", {}) or {}
    part = params.get("partition", {}) or {}
    priv = params.get("privacy", {}) or {}
    seed = str(params.get("seed", ""))
    eps = fmt_eps(priv.get("epsilon"))
    methods, grids = methods_of(pipeline)
    if grids and len(grids) == len(methods):
        # a grid: every cell is a nested run with its own method/dataset/partition/epsilon tags;
        # the global dataset/partition/privacy parameters are not what it ran on
        seeds = {(((params.get(g) or {}).get("config") or {}).get("seeds")) for g in grids} - {None}
        n_seeds = max(int(n) for n in seeds) if seeds else None
        seeds_text = f"seed {seed}" if n_seeds is None else f"{n_seeds} seed{'s' if n_seeds != 1 else ''}"
        RUN.tags = {
            "pipeline": pipeline_label,
            "method": ",".join(grids),
            "kind": "grid",
            **({"seed": seed} if n_seeds is None else {"seeds": str(n_seeds)}),
        }
        RUN.name = f"{pipeline_label} · grid · {seeds_text}"
        return
    # data clustering runs on `partition` (params `partition`); clustered FL on `rotated_data`
    # (the rotation split of params `clustered_fl.data`); the tour has both
    outputs = pipeline.all_outputs()
    rot = (params.get("clustered_fl", {}) or {}).get("data", {}) or {}
    split_of = {
        "partition": (str(part.get("scheme", "")), str(part.get("n_clients", ""))),
        "rotated_data": ("rotation", str(rot.get("n_clients", ""))),
    }
    splits = [split_of[k] for k in ("partition", "rotated_data") if k in outputs] or [split_of["partition"]]
    RUN.tags = {
        "pipeline": pipeline_label,
        "method": ",".join(methods) if methods else pipeline_label,
        "kind": "method" if len(methods) <= 1 else "tour",
        "dataset": dataset_label(ds, params.get("data_paths")) if ds.get("name") else "",
        "partition": ",".join(s for s, _ in splits),
        "n_clients": ",".join(n for _, n in splits),
        "epsilon": eps,
        "seed": seed,
    }
    if ds.get("name") in DATASET_NAMES:  # what the data's scaling reads (privacy.json says it too)
        options = ds.get("options") if isinstance(ds.get("options"), dict) else None
        scaling = planned_scaling(ds["name"], ds.get("scale", "minmax"), options)
        RUN.tags["scaling"] = f"{scaling['scaling']} ({SCALING_READS_TAG[scaling['reads']]})"
    if priv.get("epsilon") is not None:
        RUN.tags["dp_scope"] = SCOPE_TAG
    if len(methods) == 1:
        RUN.tags["trust_model"] = _trust_model(methods[0], params, priv)
        RUN.tags.update(_backend_tags(methods[0], params))
        server = _server_data(methods[0], params)
        if server:
            RUN.tags["server_data"] = server
    RUN.name = run_name(RUN.tags["method"], RUN.tags["dataset"], RUN.tags["partition"], eps, seed)
    if len(methods) > 1:
        # one nested run per method: the split of a method is the one its pipeline reads
        RUN.nested = True
        for m in methods:
            ins = {i for n in pipeline.nodes if n.namespace and n.namespace.split(".")[0] == m for i in n.inputs}
            scheme, n_clients = split_of["rotated_data"] if "rotated_data" in ins else split_of["partition"]
            tags = {
                **RUN.tags,
                "method": m,
                "kind": "method",
                "partition": scheme,
                "n_clients": n_clients,
                "trust_model": _trust_model(m, params, priv),
                **_backend_tags(m, params),
            }
            RUN.method_tags[m] = tags
            RUN.method_names[m] = run_name(m, tags["dataset"], scheme, eps, seed)
            if m.endswith("benchmark"):  # a grid inside the tour: its cells say their own budget
                RUN.method_tags[m] = {
                    **{k: v for k, v in tags.items() if k not in ("epsilon", "trust_model")},
                    "kind": "grid",
                }
                RUN.method_names[m] = f"{m} · grid"
        RUN.name = f"tour · {RUN.tags['dataset']}/{RUN.tags['partition']} · ε={eps} · seed {seed}"


class RunTagsHook:
    """Names and tags the MLflow run that kedro-mlflow opens, and opens each method's nested run."""

    def __init__(self):
        self._run_params: dict[str, Any] = {}
        self._tagged = False

    @property
    def _tags(self) -> dict[str, str]:
        return RUN.tags

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._run_params = dict(run_params)
        self._tagged = False
        RUN.reset()
        try:
            params = catalog.load("parameters")
        except Exception:  # a catalog without parameters: nothing to tag
            params = {}
        _plan(_pipeline_label(run_params), pipeline, params)

    def _tag_once(self) -> None:
        if self._tagged:
            return
        try:
            active = mlflow.active_run()
            if active is None:
                return
            RUN.parent_id = active.info.run_id
            client = mlflow.tracking.MlflowClient()
            existing = client.get_run(RUN.parent_id).data.tags
            fixed = {}
            for key, value in self._run_params.items():
                if not value or key not in existing:
                    continue
                new_key = _RENAMED_TAGS.get(key, key)
                if new_key != key:
                    client.delete_tag(RUN.parent_id, key)
                fixed[new_key] = tag_value(value)
            if needs_config_file(self._run_params):
                # lists in --params cannot be given back as one --params option: the run's config
                # file, an artifact of this run, re-runs it (download it into the project first)
                mlflow.log_dict(kedro_run_config(self._run_params), RUN_CONFIG_ARTIFACT)
                fixed["kedro_command"] = kedro_command(self._run_params, RUN_CONFIG_ARTIFACT)
                fixed["kedro_run_config"] = f"{RUN_CONFIG_ARTIFACT} (an artifact of this run)"
            else:
                fixed["kedro_command"] = kedro_command(self._run_params)
            mlflow.set_tags({**fixed, **RUN.tags, "mlflow.runName": RUN.name})
            self._tagged = True
            # the UI opens the experiment on the runs table for model training, not the GenAI view
            exp_id = active.info.experiment_id
            if client.get_experiment(exp_id).tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not set MLflow tags: %s", exc)

    @staticmethod
    def _open_method_run(method: str) -> None:
        RUN.close_method_run()
        try:
            if mlflow.active_run() is None:
                return
            known = method in RUN.method_run_ids
            run = mlflow.start_run(
                run_id=RUN.method_run_ids.get(method), nested=True, run_name=None if known else RUN.method_names[method]
            )
            RUN.open_method = method
            if not known:
                RUN.method_run_ids[method] = run.info.run_id
                mlflow.set_tags({**RUN.method_tags[method], "mlflow.runName": RUN.method_names[method]})
        except Exception as exc:  # tracking must never break a run
            logger.warning("could not open the MLflow run of %s: %s", method, exc)

    @hook_impl(trylast=True)  # after kedro-mlflow has re-opened the pipeline's run for this node
    def before_node_run(self, node, catalog, inputs) -> None:
        self._tag_once()
        method = method_of(node) if RUN.nested else None
        if method in RUN.method_tags and RUN.open_method != method:
            self._open_method_run(method)

    @hook_impl
    def on_node_error(self, error, node, catalog, inputs, is_async) -> None:
        RUN.close_method_run(status="FAILED")

    @hook_impl(tryfirst=True)  # before kedro-mlflow ends the pipeline's run
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        RUN.close_method_run()

    @hook_impl(tryfirst=True)
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        RUN.close_method_run(status="FAILED")


class MethodRunsCloseHook:
    """Ends the nested run of the previous method before kedro-mlflow re-opens the pipeline's run for
    the next node (it runs first; :class:`RunTagsHook` opens the next method's run last)."""

    @hook_impl(tryfirst=True)
    def before_node_run(self, node, catalog, inputs) -> None:
        if not RUN.nested or RUN.open_method is None:
            return
        if method_of(node) != RUN.open_method:
            RUN.close_method_run()
