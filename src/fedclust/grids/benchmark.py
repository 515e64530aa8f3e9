"""One benchmark across all federated data clustering methods.

Every method sees the same data, the same partition, the same privacy budget and the same seeds.
Cells: ``datasets`` x ``partitions`` x ``epsilons`` x ``seeds`` x ``methods``. A data set is a name
(``digits``) or a spec (``{name: csv, path: ..., options: {label: y}, label: mine, scale: ...}``,
:func:`dataset_specs`); records, MLflow runs and the report name it by its label. Per cell: ACC, NMI,
ARI (on a data set without labels, with its number of clusters ``k`` in its spec, the k-means
objective ratio instead: :func:`fedclust.metrics.objective_scores`), the cost (rounds, bytes up and down per client, compute, wall and cell time, rounds and time to
90 % of the final ACC) and the accountant's epsilon for the noise actually added.

Every method runs through the method registry (:func:`run_method`: its config class, ``calibrate``
and ``run``, as a single run of it), with its own defaults except the benchmark's shared settings
where they are set and ``method_settings.<method>`` (:func:`method_settings`); the centralized
references come from the registry too (:data:`fedclust.registry.REFERENCES`). The benchmark keeps no
table of methods of its own.

Privacy, the same *accounted* budget for every private method (``accountant``, sample-level, the run's delta):

* FKM, FZKM (local_iters = 1), DK++ (its DP variant: ``seeding_rounds = 0``, the k-means||
  seeding being a data-dependent selection): noise multiplier calibrated over all rounds by the
  accountant; DKM has no DP variant (its coreset is a data-dependent selection of private rows,
  so under a finite budget it is ``not applicable``);
* DP-FedC: its paper budget eps_bar is chosen by bisection so that the accountant rates its
  releases at the target (:func:`fedclust.clustering.dp_fedc.eps_bar_for_budget`);
* FedSC: perturbed data (rows clipped to its ``clip_tau``), one Gaussian release calibrated by the
  accountant;
* initial centroids W^0, shared by every method of a cell: in a non-private cell the paper's k
  random data rows (``init = "data"``); in a private cell data-independent points, uniform in the
  public domain ``init_domain`` (default [0, 1]) pulled into the clip ball (``init = "uniform_box"``),
  since data rows as W^0 would be released unaccounted. Every record names its
  ``init`` in its params;
* FedCAvg, FedCGds and the centralized references (k-means, spectral clustering) have no private
  variant: under a finite budget they are reported with status ``not applicable``, never skipped.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np

from fedclust.clustering._common import default_init
from fedclust.data.preprocess import scaling_statistics
from fedclust.data.registry import SPEC_KEYS, TABLE_NAMES, check_dataset_params, dataset_label
from fedclust.errors import DataError
from fedclust.executors import without_execution
from fedclust.experiments import eps_label
from fedclust.grids import run_grid
from fedclust.grids._data import load, load_cached, load_spec, load_spec_cached, memo, stamp
from fedclust.grids.benchmark_cfl import (  # noqa: F401 (the clustered-FL half, part of this module's interface)
    CFL_METHODS,
    CFL_METRICS,
    CFL_PRIVATE,
    DATA_METHODS,
    cell_run_name,
    check_methods,
    clustered_fl_cells,
    clustered_fl_methods,
    run_clustered_fl_cell,
)
from fedclust.metrics import (
    objective_scores,
    reference_kmeans_objective,
    scores_with_chance,
    time_to_90pct,
)
from fedclust.partition import LABEL_SCHEMES, make_partition
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.registry import REFERENCES, REGISTRY, trust_model_of
from fedclust.registry.clustering import describe_server_data

#: the data-clustering methods (the registry's, then its centralized references)
ALL_METHODS = DATA_METHODS
#: the methods with a DP variant -> Gaussians per round (None: calibrated otherwise), from the registry
PRIVATE = {
    name: spec.mechanisms_per_round for name, spec in REGISTRY.items() if spec.family == "clustering" and spec.private
}


def not_private_note(method: str) -> str:
    """Why ``method`` is not run under a finite budget: a centralized reference, the registry's
    non-DP step of a method without a DP variant (DKM), or no private variant."""
    if method in REFERENCES:
        return "centralized reference"
    spec = REGISTRY[method]
    steps = spec.non_dp_steps(spec.config()) if spec.non_dp_steps is not None else []
    return steps[0] if steps else "the method has no private variant"


METRICS = [
    "ACC",
    "NMI",
    "ARI",
    "epsilon_accountant",
    "uploaded_reals",
    "wall_time_s",
    "rounds",
    "bytes_up_per_client",
    "bytes_down_per_client",
    "compute_time_s",
    "cell_wall_time_s",
    "rounds_to_90pct_ACC",
    "time_to_90pct_ACC_s",
]
#: what a record of a data set without labels carries instead of ACC/NMI/ARI and their chance lines
#: (:func:`fedclust.metrics.objective_scores`): summarized only where some record has them
OBJECTIVE_METRICS = ["objective_ratio", "objective", "objective_kmeans"]
CURVE_KEYS = ("dataset", "partition", "method", "epsilon")


def _partition_label(p: dict) -> str:
    opts = {k: v for k, v in p.items() if k != "scheme"}
    return p["scheme"] + ("(" + ",".join(f"{k}={v}" for k, v in opts.items()) + ")" if opts else "")


#: benchmark settings that every method with a setting of that name takes, when they are set (not
#: null); everything else is the method's own default (its config class in the registry, the same
#: as its ``<method>.train`` in conf/base), overridden per method by ``method_settings.<method>``
SHARED_SETTINGS = ("rounds", "private_rounds", "clients_per_round", "clip", "init_domain")


def method_settings(method: str, eps, config: dict) -> dict:
    """The ``<method>.train`` settings of ``method`` in a cell of ``config``: the benchmark's shared
    settings the method has (:data:`SHARED_SETTINGS`), the cell's trust model, and
    ``config["method_settings"][method]``; the rest is the method's own (its registry config resolves
    what depends on the budget: DK++ runs its DP variant, no k-means|| seeding, in a private cell)."""
    fields = REGISTRY[method].config.fields()
    out = {k: config[k] for k in SHARED_SETTINGS if k in fields and config.get(k) is not None}
    if "trust_model" in fields and config.get("trust_model") is not None:
        out["trust_model"] = trust_model_of(method, config["trust_model"], True)
    out.update((config.get("method_settings") or {}).get(method) or {})
    return out


def method_rounds(method: str, eps, config: dict) -> int | None:
    """Rounds of ``method`` in a cell (a private k-means-family run has its ``private_rounds``);
    None for the centralized references."""
    if method in REFERENCES:
        return None
    cfg = REGISTRY[method].config_from(method_settings(method, eps, config))
    if hasattr(cfg, "rounds_for"):
        return cfg.rounds_for(eps is not None)
    return getattr(cfg, "rounds", None)


def trust_model(method: str, eps, cfg: dict) -> str:
    """The trust model of a method's private cell (``none`` without DP or without a DP variant)."""
    return trust_model_of(method, cfg.get("trust_model"), eps is not None)


def run_method(method: str, dataset, partition, seed: int, eps, delta: float, config: dict):
    """One method of a cell, through the registry: ``(result, noise)`` of its ``calibrate`` and ``run``
    with :func:`method_settings` (what a single run with those ``<method>.train`` settings and
    ``privacy`` = ``{epsilon, delta, accountant}`` computes). A centralized reference runs on the
    pooled data (``noise`` None)."""
    if method in REFERENCES:
        return REFERENCES[method].run(dataset, seed), None
    spec = REGISTRY[method]
    cfg = spec.config_from(method_settings(method, eps, config))
    privacy = {"epsilon": eps, "delta": delta, "accountant": config.get("accountant", "rdp")}
    noise = spec.calibrate(privacy, cfg, dataset, partition)
    return spec.run(dataset, partition, noise, cfg, int(seed)), noise


def server_data_param(method: str, eps, config: dict) -> dict:
    """``{"server_data": what the server holds}`` for a method with a server sample that uses one
    (every private result says which: a holdout of the same data is the most favourable case)."""
    if method in REFERENCES:
        return {}
    cfg = REGISTRY[method].config_from(method_settings(method, eps, config))
    if getattr(cfg, "server_data", "none") == "none" and method != "fed_dp_kmeans":
        return {}
    return {"server_data": describe_server_data(cfg)}


#: the config keys that enumerate the data-clustering cells (a cell carries its own value of them)
AXES = ("datasets", "partitions", "seeds", "epsilons", "clustered_fl")
#: the keys of a benchmark data-set entry: those of a data-set spec (:data:`SPEC_KEYS`) and ``k``, its
#: number of clusters (required without labels; default: its number of classes)
ENTRY_KEYS = (*SPEC_KEYS, "k")
#: the kinds of table whose labels are a column (``options.label``): without it, no labels
_LABEL_COLUMN_TABLES = ("csv", "parquet", "npz")


def dataset_specs(config: dict, data_paths: dict | None = None) -> dict[str, dict | None]:
    """``benchmark.config.datasets`` as ``{label: spec}``, in order. An entry is a name (``digits``,
    ``mnist``: read from ``data_paths`` as today; spec None) or a mapping with the keys of
    :data:`SPEC_KEYS`: ``name`` (any ``dataset.name``), ``path`` (default ``data_paths.<name>``),
    ``options`` (the loader's, e.g. ``{label: y}`` for a table), ``label`` (the name of its rows in
    records, MLflow and the report; default :func:`fedclust.data.registry.dataset_label`: a file's
    stem) and ``scale`` (default ``minmax``). A name of a user's file (``csv``, ``parquet``, ``npz``,
    ``mat``) given alone becomes a spec with its ``data_paths`` entry. ``k`` (a positive int) is the
    number of clusters every method and reference looks for (default: the number of classes). A table
    without ``options.label`` has no labels: it needs ``k`` (refused here, before any cell, without
    it), and its methods are scored by the k-means objective ratio instead of ACC/NMI/ARI."""
    entries = config.get("datasets", ["digits"])
    if isinstance(entries, (str, dict)):
        entries = [entries]
    out: dict[str, dict | None] = {}
    for entry in entries or []:
        if isinstance(entry, str) and entry not in TABLE_NAMES:
            label, spec = entry, None
        elif isinstance(entry, (str, dict)):
            entry = {"name": entry} if isinstance(entry, str) else dict(entry)
            unknown = sorted(set(entry) - set(ENTRY_KEYS))
            if unknown or not entry.get("name"):
                raise DataError(
                    f"benchmark.config.datasets: entry {entry!r} "
                    + (f"has unknown key(s) {unknown}" if unknown else "needs a 'name'")
                    + f" (keys: {', '.join(ENTRY_KEYS)})"
                )
            name = str(entry["name"])
            path = entry.get("path") or (data_paths or {}).get(name)
            options = dict(entry.get("options") or {})
            k = entry.get("k")
            if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
                raise DataError(f"benchmark.config.datasets: {entry!r}: k must be a positive int, got {k!r}")
            if name in _LABEL_COLUMN_TABLES and not options.get("label") and k is None:
                raise DataError(
                    f"benchmark.config.datasets: {entry!r} has no label column (options: {{label: <column>}}): "
                    "to run it without labels (scored by the k-means objective ratio), give its number of "
                    "clusters k: <int>"
                )
            spec = {"name": name, "path": None if path is None else str(path), "options": options}
            spec["scale"] = entry.get("scale") or "minmax"
            try:  # scale, min-max mode and declared bounds: refused here, before any cell reads the file
                check_dataset_params(name, scale=spec["scale"], options=options)
            except ValueError as exc:
                raise DataError(f"benchmark.config.datasets: {entry!r}: {exc}") from None
            spec["label"] = dataset_label({**spec, "label": entry.get("label")})
            if k is not None:
                spec["k"] = int(k)
            label = spec["label"]
        else:
            raise DataError(f"benchmark.config.datasets: entries are names or mappings, got {entry!r}")
        if label in out:
            raise DataError(
                f"benchmark.config.datasets: two data sets are labelled {label!r}; give one of them a 'label'"
            )
        out[label] = spec
    if not out:
        raise DataError("benchmark.config.datasets must name at least one data set")
    return out


def without_labels(spec: dict | None) -> bool:
    """Whether the benchmark data set of ``spec`` (:func:`dataset_specs`) is known, before it is read,
    to have no labels: a table without ``options.label``. (A ``mat`` file's labels are known only
    once it is read: :func:`_cell_data` checks it then.)"""
    return bool(spec) and spec["name"] in _LABEL_COLUMN_TABLES and not (spec.get("options") or {}).get("label")


def label_scheme_error(dataset: str, scheme: str) -> DataError:
    """The one-line refusal of a partition that splits by class label on a data set without labels."""
    return DataError(
        f"benchmark: data set {dataset!r} has no labels, so partition scheme {scheme!r} (it splits by "
        f"class label) cannot split it; use iid or kmeans for it"
    )


def load_by_label(label: str, data_paths: dict | None = None, config: dict | None = None):
    """The data set that records label ``label``: its spec in ``config`` (:func:`dataset_specs`), or
    the data set of that name (``data_paths``)."""
    spec = dataset_specs(config, data_paths).get(label) if config else None
    return load(label, data_paths) if spec is None else load_spec(spec)


def cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """The data-clustering cells: one per (data set, partition, seed, epsilon), every data-clustering
    method of ``config["methods"]`` in it (they share the partition and W^0); none when the list
    names no data-clustering method. A data set given by a spec (:func:`dataset_specs`) is
    named by its label in ``dataset`` and carries its spec in ``source`` (the file whose content
    the cell's key hashes). A partition that splits by class label (``LABEL_SCHEMES``) on a data set
    without labels is refused here, in one line naming both (:func:`label_scheme_error`)."""
    if not check_methods(config):  # only clustered-FL methods listed: no data-clustering cell
        return []
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
    for label, spec in dataset_specs(config, data_paths).items():
        for part in config.get("partitions", [{"scheme": "iid"}]):
            if without_labels(spec) and part.get("scheme") in LABEL_SCHEMES:
                raise label_scheme_error(label, part["scheme"])
    return [
        {
            "kind": "data",
            "dataset": label,
            **({"source": spec} if spec is not None else {}),
            "partition": dict(part),
            "seed": seed,
            "epsilon": eps,
            "config": shared,
            "data_paths": dict(data_paths or {}),
        }
        for label, spec in dataset_specs(config, data_paths).items()
        for part in config.get("partitions", [{"scheme": "iid"}])
        for seed in range(int(config.get("seeds", 2)))
        for eps in config.get("epsilons", [None, 2.0])
    ]


def cost_metrics(res, rounds: int | None, n_clients: int, compute_s: float) -> dict[str, float]:
    """What a method's run cost: ``rounds``, bytes sent up per client (uploaded reals, 8 bytes each,
    over the clients), bytes sent down per client (estimated: the server sends its k x m centroids to
    every client each round), and the rounds and time to reach 90 % of the final ACC (the time in
    proportion of the rounds: no per-round clock is kept)."""
    out: dict[str, float] = {"compute_time_s": float(compute_s)}
    rounds = res.info.get("rounds", rounds)
    if rounds is not None:
        out["rounds"] = float(rounds)
        out["bytes_up_per_client"] = 8.0 * float(res.uploaded_reals) / max(n_clients, 1)
        C = getattr(res, "centroids", None)
        if getattr(C, "size", 0):
            out["bytes_down_per_client"] = 8.0 * float(rounds) * float(C.size)
    out.update(time_to_90pct(res.history, compute_s))
    return out


def _cell_data(cell: dict):
    """``(dataset, partition)`` of a data-clustering cell: its data set and its partition (memoised
    per data set, scheme, clients and seed). The data set's ``n_classes`` is the number of clusters
    the methods look for: the ``k`` of its entry, else its number of classes; without labels, ``labels`` is
    None (no method scores its rounds against placeholders) and ``labelled`` False."""
    ds_name, part, seed = cell["dataset"], cell["partition"], cell["seed"]
    data_paths, source = cell["data_paths"], cell.get("source")
    n_clients = int(cell["config"].get("n_clients", 10))
    data = load_cached(ds_name, data_paths) if source is None else load_spec_cached(source)
    k = (source or {}).get("k")
    if not data.labelled:
        if k is None:
            raise DataError(
                f"benchmark: data set {ds_name!r} has no labels: give its entry in benchmark.config.datasets "
                "its number of clusters (k: <int>)"
            )
        if part["scheme"] in LABEL_SCHEMES:
            raise label_scheme_error(ds_name, part["scheme"])
    X, y = data.X.astype(np.float64), data.y
    opts = {kk: v for kk, v in part.items() if kk != "scheme"}
    path = data_paths.get(ds_name) if source is None else source.get("path")
    client = memo(
        ("benchmark_partition", ds_name, source, stamp(path), part, n_clients, seed),
        lambda: (
            make_partition(part["scheme"], X=X, y=y, images=data.images, n_clients=n_clients, seed=seed, **opts).client
        ),
    )
    dataset = SimpleNamespace(
        name=ds_name,
        X=X,
        y=y,
        labels=data.labels,
        labelled=data.labelled,
        n_classes=int(k) if k is not None else data.n_classes,
        images=data.images,
        meta=data.meta,
    )
    return dataset, SimpleNamespace(client=client)


def _reference_objective(cell: dict, dataset) -> float:
    """The k-means objective of non-private centralized k-means with the data set's ``k`` clusters
    (:func:`fedclust.metrics.reference_kmeans_objective`, seed 0: the same for every cell and method
    of the data set), once per data set and file in this process."""
    source = cell.get("source")
    path = cell["data_paths"].get(cell["dataset"]) if source is None else source.get("path")
    return memo(
        ("benchmark_reference_objective", cell["dataset"], source, stamp(path), int(dataset.n_classes)),
        lambda: reference_kmeans_objective(dataset.X, int(dataset.n_classes)),
    )


def cell_scores(cell: dict, dataset, res, seed: int) -> dict[str, float]:
    """A method's scores in a cell: ACC/NMI/ARI with their chance lines, the majority baseline and
    the flags (:func:`fedclust.metrics.scores_with_chance`) on a labelled data set; without labels,
    the k-means objective of its centres relative to non-private centralized k-means
    (:func:`fedclust.metrics.objective_scores`, ``objective_ratio``: lower is better, 1 = as good)."""
    if getattr(dataset, "labelled", True):
        return scores_with_chance(dataset.y, res.labels, seed=seed)
    centers = getattr(res, "centroids", None)
    return objective_scores(
        dataset.X, centers=centers, labels=res.labels, reference=_reference_objective(cell, dataset)
    )


def _method_params(method: str, cell: dict, init: str) -> tuple[dict, dict]:
    """``(tags, params)`` of a method's record in a cell."""
    ds_name, seed, eps, config = cell["dataset"], cell["seed"], cell["epsilon"], cell["config"]
    plabel = _partition_label(cell["partition"])
    server = server_data_param(method, eps, config)  # {} when the method holds no server sample
    tm = trust_model(method, eps, config)
    tags = {"method": method, "dataset": ds_name, "partition": plabel, "epsilon": eps_label(eps), "trust_model": tm}
    params = {
        "dataset": ds_name,
        "partition": plabel,
        "seed": seed,
        "epsilon": eps_label(eps),
        "delta": float(config.get("delta", 1e-5)),
        "n_clients": int(config.get("n_clients", 10)),
        "method": method,
        "init": "server_sample" if server else init,
        **server,
        "trust_model": tm,
        "accountant": config.get("accountant", "rdp"),
    }
    if method not in REFERENCES and not (eps is not None and method not in PRIVATE):
        settings = method_settings(method, eps, config)
        params.update({kk: v for kk, v in settings.items() if isinstance(v, (int, float, str, bool))})
        params["rounds"] = method_rounds(method, eps, config)
        cfg = REGISTRY[method].config_from(settings)
        if hasattr(cfg, "seeding_for"):  # DK++: the k-means|| rounds its run resolves
            params["seeding_rounds"] = cfg.seeding_for(eps is not None)
    return tags, params


def _method_record(method: str, cell: dict, data: tuple, init: str, setup_s: float) -> dict:
    """The record of one method of a data-clustering cell: not applicable (a method without a DP
    variant under a finite budget), or its scores, cost and accounted epsilon."""
    seed, eps, config = cell["seed"], cell["epsilon"], cell["config"]
    tags, params = _method_params(method, cell, init)
    name = cell_run_name(cell["dataset"], params["partition"], eps_label(eps), method, seed)
    if eps is not None and method not in PRIVATE:
        return {
            "name": name,
            "tags": {**tags, "status": "not applicable"},
            "params": {**params, "status": "not applicable"},
            "metrics": {},
            "history": {},
            "note": not_private_note(method),
        }
    dataset, partition = data
    scaling = scaling_statistics(getattr(dataset, "meta", None))
    if scaling:  # what the scaling read before any protocol ran (the report says it per data set)
        params.update(scaling=scaling["scaling"], scaling_reads=scaling["reads"])
    delta = params["delta"]
    t0 = time.perf_counter()
    res, noise = run_method(method, dataset, partition, seed, eps, delta, config)
    compute = time.perf_counter() - t0
    metrics = cell_scores(cell, dataset, res, seed)
    metrics["wall_time_s"] = setup_s + compute
    metrics["uploaded_reals"] = float(res.uploaded_reals)
    metrics.update(cost_metrics(res, params.get("rounds"), params["n_clients"], compute))
    metrics["epsilon_accountant"] = accounted(res.dp_events, delta) if res.dp_events else math.inf
    if noise and "eps_bar" in noise:
        metrics["dp_fedc_eps_bar"] = float(noise["eps_bar"])
    hist = {h: res.history[h] for h in ("ACC", "objective") if h in res.history}
    rec = {
        "name": name,
        "tags": {**tags, "status": "ok"},
        "params": {**params, "status": "ok"},
        "metrics": metrics,
        "history": hist,
    }
    if seed == 0 and eps is None:
        rec["labels"] = np.asarray(res.labels)  # for the 2-D embedding plot
    return rec


def run_cell(cell: dict) -> list[dict]:
    """The records of one cell (a pure function of ``cell``): every method of a data-clustering
    cell, or one clustered-FL cell (``kind``: ``cfl``, ``cfl_na``, ``rr``; :func:`clustered_fl_cells`).

    Every method runs through the registry (:func:`run_method`). Times per record: ``compute_time_s``
    (the method's calibration and run), ``wall_time_s`` (that plus the cell's data and partition
    steps: what a single run of the method takes) and ``cell_wall_time_s`` (the whole cell)."""
    if cell.get("kind", "data") != "data":
        return run_clustered_fl_cell(cell)
    t_cell = time.perf_counter()
    methods = check_methods(cell["config"])
    data = _cell_data(cell)
    setup_s = time.perf_counter() - t_cell
    # the start of the methods without a server sample, by the public rule they apply themselves:
    # k data rows when not private, uniform_box (no data read) when private
    init = default_init(cell["epsilon"] is not None)
    out = [_method_record(method, cell, data, init, setup_s) for method in methods]
    cell_s = time.perf_counter() - t_cell
    for rec in out:
        rec["tags"]["family"] = "data_clustering"
        if rec["metrics"]:
            rec["metrics"]["cell_wall_time_s"] = cell_s
    return out


def run(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """The data-clustering half (:func:`cells`) on ``config.executor`` (:func:`fedclust.grids.run_grid`)."""
    return run_grid(_DataHalf, config, data_paths, label="benchmark", **run_options)


class _DataHalf:
    cells = staticmethod(cells)
    run_cell = staticmethod(run_cell)


def run_clustered_fl(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """The clustered-FL half (:func:`clustered_fl_cells`) on ``config.executor``."""
    return run_grid(_ClusteredFLHalf, config, data_paths, label="benchmark", **run_options)


class _ClusteredFLHalf:
    cells = staticmethod(clustered_fl_cells)
    run_cell = staticmethod(run_cell)


def all_cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """Both halves' cells: data clustering (:func:`cells`), then clustered FL (:func:`clustered_fl_cells`)."""
    return cells(config, data_paths) + clustered_fl_cells(config, data_paths)


class _Both:
    cells = staticmethod(all_cells)
    run_cell = staticmethod(run_cell)


def run_all(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """Both halves: federated data clustering and clustered FL, one executor for all their cells."""
    return run_grid(_Both, config, data_paths, label="benchmark", **run_options)


#: the tables and figures live in :mod:`fedclust.grids.benchmark_figures` (which reads this module)
_FIGURES = (
    "tables",
    "chance_levels",
    "privacy_utility_figure",
    "clustered_fl_privacy_utility_figure",
    "rounds_figure",
    "confusion_figure",
    "communication_figure",
    "embedding_figure",
    "partition_heatmaps",
)


def __getattr__(name: str):
    """``benchmark.tables``, ``benchmark.rounds_figure``, ...: the names of
    :mod:`fedclust.grids.benchmark_figures`, loaded when first used (it imports this module)."""
    if name not in _FIGURES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fedclust.grids import benchmark_figures  # imports this module: loaded on first use

    return getattr(benchmark_figures, name)
