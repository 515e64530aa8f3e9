"""One benchmark across all federated data clustering methods.

Every method sees the same data, the same partition, the same privacy budget and the same seeds.
Cells: ``datasets`` x ``partitions`` x ``epsilons`` x ``seeds`` x ``methods``. A data set is a name
(``digits``) or a spec (``{name: csv, path: ..., options: {label: y}, label: mine, scale: ...}``,
:func:`dataset_specs`); records, MLflow runs and the report name it by its label. Per cell: ACC, NMI,
ARI, the cost (rounds, bytes up and down per client, compute, wall and cell time, rounds and time to
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

import dataclasses
import math
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd

from fedclust.clustering._common import default_init, initial_centroids
from fedclust.data.registry import SPEC_KEYS, TABLE_NAMES, dataset_label
from fedclust.errors import DataError
from fedclust.executors import without_execution
from fedclust.experiments import eps_label, records_frame, summarize
from fedclust.grids import run_grid
from fedclust.grids._data import load, load_cached, load_spec, load_spec_cached, memo, stamp
from fedclust.metrics import (
    data_chance_line,
    is_at_chance,
    is_collapsed,
    scores_with_chance,
    time_to_90pct,
)
from fedclust.partition import make_partition
from fedclust.partition.report import label_matrix
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.registry import REFERENCES, REGISTRY, trust_model_of
from fedclust.registry.clustering import describe_server_data

ALL_METHODS = (
    "fkm",
    "fzkm",
    "dk_pp",
    "dkm",
    "dp_fedc",
    "fed_dp_kmeans",
    "fedc_avg",
    "fedc_gds",
    "fedsc",
    "kmeans",
    "sc",
)
#: the methods with a DP variant -> Gaussians per round (None: calibrated otherwise), from the registry
PRIVATE = {
    name: spec.mechanisms_per_round for name, spec in REGISTRY.items() if spec.family == "clustering" and spec.private
}
#: Why a method without a DP variant is not run under a finite budget (default: no private variant).
NOT_DP = {"dkm": "DKM's coreset points and local centres are data-selected private values: no DP variant"}
CENTRALIZED = ("kmeans", "sc")
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
    ``config["method_settings"][method]``. A private cell runs DK++ in its DP variant (no k-means||
    seeding); a non-private one keeps at most ``rounds - 2`` seeding rounds."""
    spec = REGISTRY[method]
    fields = {f.name for f in dataclasses.fields(spec.config)}
    out = {k: config[k] for k in SHARED_SETTINGS if k in fields and config.get(k) is not None}
    if "trust_model" in fields and config.get("trust_model") is not None:
        out["trust_model"] = trust_model_of(method, config["trust_model"], True)
    out.update((config.get("method_settings") or {}).get(method) or {})
    if method == "dk_pp":
        cfg = spec.config_from(out)
        out["seeding_rounds"] = dk_pp_seeding_rounds(cfg.rounds_for(eps is not None), eps, cfg.seeding_for(False))
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


def dk_pp_seeding_rounds(rounds: int, eps, default: int = 5) -> int:
    """DK++'s k-means|| rounds in a cell: ``default`` (at most R - 2) without DP, 0 (its DP variant)
    under a finite budget."""
    return 0 if eps is not None else max(0, min(int(default), rounds - 2))


def shared_init(X: np.ndarray, k: int, seed: int, eps, config: dict) -> tuple[np.ndarray, str]:
    """``(W0, init)``: the initial centroids every method of a cell starts from, and their name.

    Non-private cells: k random data rows (the papers' W^0). Private cells: ``"uniform_box"``, drawn
    without reading the data (uniform in ``config["init_domain"]``, default [0, 1], then pulled into
    the ball of radius ``config["clip"]``), so W^0 releases nothing.
    """
    init = default_init(eps is not None)
    clip = config.get("clip")
    W0 = initial_centroids(
        X, k, seed, init=init, clip=None if clip is None else float(clip), domain=config.get("init_domain")
    )
    return W0, init


#: the config keys that enumerate the data-clustering cells (a cell carries its own value of them)
AXES = ("datasets", "partitions", "seeds", "epsilons", "clustered_fl")


def _check_methods(config: dict) -> list[str]:
    """The data-clustering methods of ``config["methods"]`` (default: all of them); the list may also
    name clustered-FL methods (:data:`CFL_METHODS`), which :func:`clustered_fl_methods` picks up."""
    methods = list(config.get("methods", ALL_METHODS))
    bad = [m for m in methods if m not in ALL_METHODS and m not in CFL_METHODS]
    if bad:
        raise ValueError(f"benchmark.config.methods: unknown {bad}; valid: {list(ALL_METHODS) + list(CFL_METHODS)}")
    return [m for m in methods if m in ALL_METHODS]


def cell_run_name(dataset: str, partition: str, eps: str, method: str, seed) -> str:
    """The one name of every benchmark cell's run (both halves): ``digits/iid/eps=4/fkm/seed=0``."""
    return f"{dataset}/{partition}/eps={eps}/{method}/seed={seed}"


def dataset_specs(config: dict, data_paths: dict | None = None) -> dict[str, dict | None]:
    """``benchmark.config.datasets`` as ``{label: spec}``, in order. An entry is a name (``digits``,
    ``mnist``: read from ``data_paths`` as today; spec None) or a mapping with the keys of
    :data:`SPEC_KEYS`: ``name`` (any ``dataset.name``), ``path`` (default ``data_paths.<name>``),
    ``options`` (the loader's, e.g. ``{label: y}`` for a table), ``label`` (the name of its rows in
    records, MLflow and the report; default :func:`fedclust.data.registry.dataset_label`: a file's
    stem) and ``scale`` (default ``minmax``). A name of a user's file (``csv``, ``parquet``, ``npz``,
    ``mat``) given alone becomes a spec with its ``data_paths`` entry. The benchmark scores every
    method against labels, so a table without ``options.label`` is refused here, before any cell."""
    entries = config.get("datasets", ["digits"])
    if isinstance(entries, (str, dict)):
        entries = [entries]
    out: dict[str, dict | None] = {}
    for entry in entries or []:
        if isinstance(entry, str) and entry not in TABLE_NAMES:
            label, spec = entry, None
        elif isinstance(entry, (str, dict)):
            entry = {"name": entry} if isinstance(entry, str) else dict(entry)
            unknown = sorted(set(entry) - set(SPEC_KEYS))
            if unknown or not entry.get("name"):
                raise DataError(
                    f"benchmark.config.datasets: entry {entry!r} "
                    + (f"has unknown key(s) {unknown}" if unknown else "needs a 'name'")
                    + f" (keys: {', '.join(SPEC_KEYS)})"
                )
            name = str(entry["name"])
            path = entry.get("path") or (data_paths or {}).get(name)
            options = dict(entry.get("options") or {})
            if name in ("csv", "parquet", "npz") and not options.get("label"):
                raise DataError(
                    f"benchmark.config.datasets: {entry!r} has no label column (options: {{label: <column>}}); "
                    "the benchmark scores every method against labels"
                )
            spec = {"name": name, "path": None if path is None else str(path), "options": options}
            spec["scale"] = entry.get("scale") or "minmax"
            spec["label"] = dataset_label({**spec, "label": entry.get("label")})
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
    the cell's key hashes)."""
    if not _check_methods(config):  # only clustered-FL methods listed: no data-clustering cell
        return []
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
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


def run_cell(cell: dict) -> list[dict]:
    """The records of one cell (a pure function of ``cell``): every method of a data-clustering
    cell, or one clustered-FL cell (``kind``: ``cfl``, ``cfl_na``, ``rr``; :func:`clustered_fl_cells`).

    Every method runs through the registry (:func:`run_method`). Times per record: ``compute_time_s``
    (the method's calibration and run), ``wall_time_s`` (that plus the cell's data and partition
    steps: what a single run of the method takes) and ``cell_wall_time_s`` (the whole cell)."""
    kind = cell.get("kind", "data")
    if kind != "data":
        return _run_clustered_fl_cell(cell)
    t_cell = time.perf_counter()
    ds_name, part, seed, eps = cell["dataset"], cell["partition"], cell["seed"], cell["epsilon"]
    config, data_paths = cell["config"], cell["data_paths"]
    methods = _check_methods(config)
    delta = float(config.get("delta", 1e-5))
    n_clients = int(config.get("n_clients", 10))
    source = cell.get("source")
    data = load_cached(ds_name, data_paths) if source is None else load_spec_cached(source)
    if not data.labelled:
        raise DataError(f"benchmark: data set {ds_name!r} has no labels; the benchmark scores against labels")
    X, y = data.X.astype(np.float64), data.y
    k = data.n_classes
    plabel = _partition_label(part)
    opts = {kk: v for kk, v in part.items() if kk != "scheme"}
    path = data_paths.get(ds_name) if source is None else source.get("path")
    client = memo(
        ("benchmark_partition", ds_name, source, stamp(path), part, n_clients, seed),
        lambda: (
            make_partition(part["scheme"], X=X, y=y, images=data.images, n_clients=n_clients, seed=seed, **opts).client
        ),
    )
    setup_s = time.perf_counter() - t_cell
    dataset = SimpleNamespace(name=ds_name, X=X, y=y, n_classes=k, images=data.images, meta=data.meta)
    partition = SimpleNamespace(client=client)
    _, init = shared_init(X, k, seed, eps, config)  # every method derives the same W^0 from (seed, init, clip)
    out = []
    for method in methods:
        tags = {"method": method, "dataset": ds_name, "partition": plabel, "epsilon": eps_label(eps)}
        server = server_data_param(method, eps, config)  # {} when the method holds no server sample
        tm = trust_model(method, eps, config)
        tags["trust_model"] = tm
        params = {
            "dataset": ds_name,
            "partition": plabel,
            "seed": seed,
            "epsilon": eps_label(eps),
            "delta": delta,
            "n_clients": n_clients,
            "method": method,
            "init": "server_sample" if server else init,
            **server,
            "trust_model": tm,
            "accountant": config.get("accountant", "rdp"),
        }
        name = cell_run_name(ds_name, plabel, eps_label(eps), method, seed)
        if eps is not None and method not in PRIVATE:
            why = (
                "centralized reference"
                if method in CENTRALIZED
                else NOT_DP.get(method, "the method has no private variant")
            )
            out.append(
                {
                    "name": name,
                    "tags": {**tags, "status": "not applicable"},
                    "params": {**params, "status": "not applicable"},
                    "metrics": {},
                    "history": {},
                    "note": why,
                }
            )
            continue
        if method not in REFERENCES:
            params.update(
                {
                    kk: v
                    for kk, v in method_settings(method, eps, config).items()
                    if isinstance(v, (int, float, str, bool))
                }
            )
            params["rounds"] = method_rounds(method, eps, config)
        t0 = time.perf_counter()
        res, noise = run_method(method, dataset, partition, seed, eps, delta, config)
        compute = time.perf_counter() - t0
        metrics = scores_with_chance(y, res.labels, seed=seed)
        metrics["wall_time_s"] = setup_s + compute
        metrics["uploaded_reals"] = float(res.uploaded_reals)
        metrics.update(cost_metrics(res, params.get("rounds"), n_clients, compute))
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
        out.append(rec)
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


CFL_METHODS = ("cfl_mgd", "ifca", "fedavg", "rr_cluster", "dp_ifca", "dp_fedavg")
CFL_PRIVATE = ("rr_cluster", "dp_ifca", "dp_fedavg")
CFL_METRICS = [
    "test_accuracy",
    "client_ACC",
    "client_NMI",
    "client_ACC_chance",
    "client_at_chance",
    "epsilon_accountant",
    "wall_time_s",
]


def clustered_fl_methods(config: dict) -> list[str]:
    """The clustered-FL methods a benchmark runs: ``clustered_fl.methods`` where it is set, else the
    clustered-FL methods listed in ``methods``; none otherwise (a config that lists only
    data-clustering methods runs no clustered-FL cell, whatever its ``clustered_fl`` settings)."""
    cfg = config.get("clustered_fl") or {}
    if cfg.get("methods") is not None:
        methods = list(cfg["methods"])
        bad = [m for m in methods if m not in CFL_METHODS]
        if bad:
            raise ValueError(f"benchmark.config.clustered_fl.methods: unknown {bad}; valid: {list(CFL_METHODS)}")
        return methods
    _check_methods(config)
    return [m for m in config.get("methods", ()) if m in CFL_METHODS]


def clustered_fl_cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """The clustered-FL half's cells: every method of :func:`clustered_fl_methods` (none: no cell)
    on the same rotated clients, budgets and seeds, with the settings of ``config["clustered_fl"]``.

    Non-private methods (CFL-MGD, IFCA, FedAvg) run at epsilon = inf (cells of :mod:`fedclust.grids.cfl`)
    and are reported as not applicable under a finite budget (one ``cfl_na`` cell per data set);
    RR-Cluster and the DP baselines are calibrated to it (client-level, the run's delta) through the
    cells of :mod:`fedclust.grids.rr`.
    """
    # the clustered-FL grids (and torch) load only when the benchmark has a clustered-FL part
    from fedclust.grids import cfl, rr

    cfg = dict(config.get("clustered_fl") or {})
    methods = clustered_fl_methods(config)
    if not methods:
        return []
    regime = cfg.get("regime") or "many_per_cluster"
    if regime not in rr.REGIMES:
        raise ValueError(f"benchmark.config.clustered_fl.regime must be one of {list(rr.REGIMES)}, got {regime!r}")
    rotation = {
        "n_groups": int(cfg.get("n_groups", 4)),
        "n_clients": int(cfg.get("n_clients", 100)),
        "samples_per_client": int(cfg.get("samples_per_client", 14)),
        "test_per_client": int(cfg.get("test_per_client", 3)),
    }
    train = {
        "rounds": int(cfg.get("rounds", 30)),
        "lr": float(cfg.get("lr", 0.1)),
        "local_steps": int(cfg.get("local_steps", 5)),
        "participation": float(cfg.get("participation", 0.25)),
        "eval_every": 5,
    }
    epsilons = cfg.get("epsilons", [None, 8.0])
    seeds = int(config.get("seeds", 2))
    partition = f"rotation({rotation['n_groups']} groups)"
    out: list[dict] = []
    public = [m for m in methods if m not in CFL_PRIVATE]
    for ds in cfg.get("datasets", ["digits"]):
        if public:
            sub = {
                "datasets": [ds],
                "methods": public,
                "seeds": seeds,
                "rotation": rotation,
                "train": {**train, "beta": 0.9, "model": {"type": "mlp", "hidden": int(cfg.get("hidden", 32))}},
            }
            out += [{"kind": "cfl", "cell": c} for c in cfl.cells(sub, data_paths)]
            finite = [e for e in epsilons if e is not None]
            if finite:
                out.append(
                    {
                        "kind": "cfl_na",
                        "dataset": ds,
                        "epsilons": finite,
                        "methods": public,
                        "seeds": seeds,
                        "partition": partition,
                    }
                )
        private = [m for m in methods if m in CFL_PRIVATE]
        if private and regime != "many_per_cluster":
            continue  # a regime preset runs once, on its own data (below)
        if private:
            sub = {
                "dataset": ds,
                "settings": ["balanced"],
                "n_clients": rotation["n_clients"],
                "samples_per_client": rotation["samples_per_client"],
                "test_per_client": rotation["test_per_client"],
                "participation": train["participation"],
                "rounds": train["rounds"],
                "lr": train["lr"],
                "local_steps": train["local_steps"],
                "hidden": [],
                "clip": float(cfg.get("clip", 0.3)),
                "delta": float(config.get("delta", 1e-5)),
                "epsilons": epsilons,
                "seeds": seeds,
                "methods": private,
                "Bs": [int(cfg.get("B", 4))],
            }
            out += [{"kind": "rr", "cell": c, "partition": partition} for c in rr.cells(sub, data_paths)]
    if regime != "many_per_cluster" and any(m in CFL_PRIVATE for m in methods):
        # a regime of rr_grid by name (its data, clients, budgets, thresholds and methods), the
        # benchmark's seeds and delta
        preset = rr.apply_regime(
            {
                "regime": regime,
                "seeds": seeds,
                "delta": float(config.get("delta", 1e-5)),
                "lr": float(cfg.get("lr", 0.1)),
                "local_steps": int(cfg.get("local_steps", 5)),
                "hidden": [],
                "clip": float(cfg.get("clip", 0.3)),
            }
        )
        # one RR threshold per table row: the preset's largest B (about its clients per cluster and
        # round); the preset is applied here, so rr.cells gets a plain config
        preset.update(Bs=[max(preset["Bs"])], regime=None)
        label = f"rotation({regime}: {preset['n_clients']} clients, q={preset['participation']:g}, B={preset['Bs'][0]})"
        out += [{"kind": "rr", "cell": c, "partition": label} for c in rr.cells(preset, data_paths)]
    return out


def _run_clustered_fl_cell(cell: dict) -> list[dict]:
    """The records of one clustered-FL cell, in the benchmark's shape: the cell run name of
    :func:`cell_run_name`, a ``trust_model`` tag (``none`` without DP), the chance line of the test
    accuracy (``test_accuracy_chance``: one over the number of classes) and the method's own cost
    (``rounds``, ``compute_time_s``: its run)."""
    # the clustered-FL grids (and torch) load only when the benchmark has a clustered-FL part
    from fedclust.grids import cfl, rr

    kind = cell["kind"]
    n_classes, rounds = None, None
    if kind == "cfl":
        inner = cell["cell"]
        recs = cfl.run_cell(inner)
        n_classes = load_cached(inner["dataset"], inner["data_paths"]).n_classes
        rounds = (inner["config"].get("train") or {}).get("rounds")
        for r in recs:
            r["tags"]["epsilon"] = "inf"
            r["metrics"]["epsilon_accountant"] = math.inf  # non-private
    elif kind == "cfl_na":
        ds = cell["dataset"]
        recs = [
            {
                "name": "",
                "tags": {
                    "method": m,
                    "dataset": ds,
                    "partition": cell["partition"],
                    "epsilon": eps_label(eps),
                    "status": "not applicable",
                },
                "params": {"dataset": ds, "method": m, "seed": seed, "status": "not applicable"},
                "metrics": {},
                "history": {},
                "note": "the method has no private variant",
            }
            for eps in cell["epsilons"]
            for m in cell["methods"]
            for seed in range(cell["seeds"])
        ]
    elif kind == "rr":
        inner = cell["cell"]
        recs = rr.run_cell(inner)
        n_classes = load_cached(inner["config"].get("dataset", "digits"), inner["data_paths"]).n_classes
        rounds = inner["config"].get("rounds")
        for r in recs:
            r["tags"]["partition"] = cell["partition"]
    else:
        raise ValueError(f"unknown benchmark cell kind {kind!r}")
    for r in recs:
        t = r["tags"]
        t.setdefault("status", "ok")
        t.setdefault("trust_model", "none")
        t["family"] = "clustered_fl"
        r["name"] = cell_run_name(t["dataset"], t["partition"], t["epsilon"], t["method"], r["params"]["seed"])
        met = r["metrics"]
        if t["status"] == "ok":
            if n_classes:
                met["test_accuracy_chance"] = 1.0 / n_classes
            if rounds is not None:
                met["rounds"] = float(rounds)
            if "wall_time_s" in met:
                met["compute_time_s"] = float(met["wall_time_s"])
    return recs


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


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    data_recs = [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]
    cfl_recs = [r for r in records if r["tags"].get("family") == "clustered_fl"]
    out = _data_tables(data_recs) if data_recs else {}
    if cfl_recs:
        frame = records_frame(cfl_recs)
        frame["status"] = frame["status"].fillna("ok")
        summ = summarize(frame, ["dataset", "epsilon", "method"], CFL_METRICS)
        summ["status"] = [
            "not applicable"
            if (
                frame[(frame["dataset"] == d) & (frame["epsilon"] == e) & (frame["method"] == m)]["status"]
                == "not applicable"
            ).all()
            else "ok"
            for d, e, m in zip(summ["dataset"], summ["epsilon"], summ["method"])
        ]
        out["clustered_fl"] = summ
    return out


def _data_tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    """The summary per (dataset, partition, epsilon, method): mean ± std over seeds of :data:`METRICS`,
    ``status``, and the chance line where the records carry it (``ACC_chance``, ``ACC_chance_hi``,
    ``NMI_chance`` of each run, :func:`fedclust.metrics.chance_scores`): ``ACC_chance_mean``,
    ``ACC_chance_hi_mean``, ``NMI_chance_mean`` and ``at_chance``, True where the group's mean ACC
    does not exceed its mean ``ACC_chance_hi`` (within noise of a random split of the same sizes).
    ``at_chance`` is False for not-applicable groups and for groups whose records have no chance line.
    Likewise ``NMI_chance_hi_mean``, ``ACC_majority_mean`` (the largest class share) and
    ``collapsed``: :func:`fedclust.metrics.is_collapsed` of the group's means."""
    frame = records_frame(records)
    frame["status"] = frame["status"].fillna("ok")
    if "trust_model" not in frame.columns:  # records stored before trust models were recorded
        frame["trust_model"] = "n/a"
    frame["trust_model"] = frame["trust_model"].fillna("n/a")
    by = ["dataset", "partition", "epsilon", "method", "trust_model"]
    lines = ("ACC_chance", "ACC_chance_hi", "NMI_chance", "NMI_chance_hi", "ACC_majority")
    chance_keys = [m for m in lines if m in frame.columns]
    summary = summarize(frame, by, METRICS + chance_keys)
    summary = summary.drop(columns=chance_keys)  # the chance line as numbers only (``<m>_mean``/``<m>_std``)
    na = frame["status"] == "not applicable"
    summary["status"] = [
        "not applicable"
        if na[
            (frame["dataset"] == d) & (frame["partition"] == p) & (frame["epsilon"] == e) & (frame["method"] == m)
        ].all()
        else "ok"
        for d, p, e, m in zip(summary["dataset"], summary["partition"], summary["epsilon"], summary["method"])
    ]
    for m in lines:
        if f"{m}_mean" not in summary.columns:
            summary[f"{m}_mean"] = math.nan
    acc = summary["ACC_mean"] if "ACC_mean" in summary.columns else pd.Series(math.nan, index=summary.index)
    summary["at_chance"] = [
        status == "ok" and is_at_chance({"ACC": a}, {"ACC_chance_hi": hi})
        for status, a, hi in zip(summary["status"], acc, summary["ACC_chance_hi_mean"])
    ]
    nmi = summary["NMI_mean"] if "NMI_mean" in summary.columns else pd.Series(math.nan, index=summary.index)
    summary["collapsed"] = [
        status == "ok"
        and is_collapsed({"ACC": a, "NMI": n}, {"ACC_chance_hi": hi, "NMI_chance_hi": nhi, "ACC_majority": maj})
        for status, a, n, hi, nhi, maj in zip(
            summary["status"],
            acc,
            nmi,
            summary["ACC_chance_hi_mean"],
            summary["NMI_chance_hi_mean"],
            summary["ACC_majority_mean"],
        )
    ]
    return {"summary": summary}


def chance_levels(records: list[dict], data_paths: dict | None = None, config: dict | None = None) -> dict[str, float]:
    """The chance ACC of every data set of ``records``: the mean ACC of a random assignment with the
    true class sizes (:func:`fedclust.metrics.data_chance_line`), the dashed line of the plots.
    ``config``: the benchmark's, where its data sets are specs (records name them by label)."""
    out = {}
    for ds in dict.fromkeys(
        r["tags"]["dataset"] for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"
    ):
        y = load_by_label(ds, data_paths, config).y
        out[ds] = data_chance_line(y)["ACC_chance"]
    return out


def privacy_utility_figure(records: list[dict], chance: dict | float | None = None):
    """ACC (mean ± std over seeds) against the accounted epsilon per method, one panel per
    (dataset, partition); non-private results at the right end; ``chance`` as a dashed line."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import privacy_utility_figure as figure

    recs = [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]
    return figure(
        recs,
        metric="ACC",
        series="method",
        facets=("dataset", "partition"),
        chance=chance,
        title="privacy-utility (data clustering): ACC against the accounted ε; methods without a DP variant only at ∞",
    )


def clustered_fl_privacy_utility_figure(records: list[dict], chance: dict | float | None = None):
    """The clustered-FL half: test accuracy against the accounted epsilon per method."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import privacy_utility_figure as figure

    recs = [r for r in records if r["tags"].get("family") == "clustered_fl"]
    return figure(
        recs,
        metric="test_accuracy",
        series="method",
        facets=("dataset",),
        chance=chance,
        title="privacy-utility (clustered FL): test accuracy against the accounted ε (client-level)",
    )


def rounds_figure(records: list[dict]):
    """Per-round curves across budgets, first data set and partition: the data-clustering ACC
    (the cells pass the labels to the methods, which record ACC per round as experimenter-side
    evaluation); else the clustered-FL test accuracy; else the objective."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import rounds_by_epsilon_figure

    data = [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]
    acc = [r for r in data if (r.get("history") or {}).get("ACC")]
    if acc:
        return rounds_by_epsilon_figure(acc, "ACC", title="ACC per round across ε (mean over seeds)")
    cfl = [r for r in records if r["tags"].get("family") == "clustered_fl"]
    if any((r.get("history") or {}).get("test_accuracy") for r in cfl):
        return rounds_by_epsilon_figure(
            cfl,
            "test_accuracy",
            focus=("dataset",),
            title="clustered FL: test accuracy per evaluation round across ε (mean over seeds)",
        )
    return rounds_by_epsilon_figure(data, "objective", title="objective per round across ε (mean over seeds)")


def confusion_figure(records: list[dict], data_paths: dict | None = None, config: dict | None = None):
    """The confusion matrix of the best run (highest ACC among the non-private seed-0 runs that
    kept their labels), clusters matched to classes."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import best_run, message_figure
    from fedclust.plots import confusion_figure as figure

    best = best_run(records, "ACC")
    if best is None:
        return message_figure("no run kept its labels (seed 0, no DP)", "confusion matrix")
    t = best["tags"]
    y = load_by_label(t["dataset"], data_paths, config).y
    return figure(
        y,
        best["labels"],
        title=f"best run: {t['method']} · {t['dataset']} / {t['partition']} · "
        f"ε = {t['epsilon']} · ACC {best['metrics']['ACC']:.3f}",
    )


def communication_figure(records: list[dict]):
    """Final ACC against uploaded reals (log scale), one marker per method, non-private runs."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    import matplotlib.pyplot as plt

    frame = records_frame([r for r in records if r["tags"]["epsilon"] == "inf" and r["metrics"].get("uploaded_reals")])
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    if frame.empty:
        ax.text(0.5, 0.5, "no non-private run with uploads", ha="center")
        return fig
    for method, g in frame.groupby("method", sort=False):
        ax.scatter(g["uploaded_reals"], g["ACC"], label=method, alpha=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("uploaded reals (whole run)")
    ax.set_ylabel("ACC")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title("communication: ACC vs uploaded reals (no DP)", fontsize=10)
    fig.tight_layout()
    return fig


def embedding_figure(records: list[dict], data_paths: dict | None = None, config: dict | None = None):
    """A 2-D PCA embedding of every data set, colored by each method's predicted clusters (seed 0,
    no DP, first partition), with the true classes in the first column."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    with_labels = [r for r in records if "labels" in r]
    datasets = list(dict.fromkeys(r["tags"]["dataset"] for r in with_labels))
    if not datasets:
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.text(0.5, 0.5, "no non-private seed-0 run", ha="center")
        return fig
    first_part = {d: next(r["tags"]["partition"] for r in with_labels if r["tags"]["dataset"] == d) for d in datasets}
    methods = list(dict.fromkeys(r["tags"]["method"] for r in with_labels))
    fig, axes = plt.subplots(
        len(datasets), len(methods) + 1, figsize=(2.4 * (len(methods) + 1), 2.4 * len(datasets)), squeeze=False
    )
    for i, d in enumerate(datasets):
        data = load_by_label(d, data_paths, config)
        Z = PCA(2, random_state=0).fit_transform(data.X)
        axes[i][0].scatter(Z[:, 0], Z[:, 1], c=data.y, s=2, cmap="tab20")
        axes[i][0].set_title(f"{d}: true classes", fontsize=8)
        for j, m in enumerate(methods, 1):
            rec = next(
                (
                    r
                    for r in with_labels
                    if r["tags"]["dataset"] == d
                    and r["tags"]["method"] == m
                    and r["tags"]["partition"] == first_part[d]
                ),
                None,
            )
            ax = axes[i][j]
            if rec is not None:
                ax.scatter(Z[:, 0], Z[:, 1], c=rec["labels"], s=2, cmap="tab20")
                ax.set_title(f"{m} (ACC {rec['metrics']['ACC']:.2f})", fontsize=8)
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("PCA embedding colored by predicted cluster (seed 0, no DP)", fontsize=10)
    fig.tight_layout()
    return fig


def partition_heatmaps(config: dict, data_paths: dict | None = None):
    """The label-by-client heatmap of every partition scheme of the first data set (seed 0)."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    import matplotlib.pyplot as plt

    ds = next(iter(dataset_specs(config, data_paths)))
    data = load_by_label(ds, data_paths, config)
    parts = config.get("partitions", [{"scheme": "iid"}])
    fig, axes = plt.subplots(1, len(parts), figsize=(3.6 * len(parts), 3.2), squeeze=False)
    for ax, part in zip(axes[0], parts):
        opts = {k: v for k, v in part.items() if k != "scheme"}
        p = make_partition(
            part["scheme"],
            X=data.X,
            y=data.y,
            images=data.images,
            n_clients=int(config.get("n_clients", 10)),
            seed=0,
            **opts,
        )
        im = ax.imshow(label_matrix(p, data.y), aspect="auto", cmap="viridis")
        ax.set_title(_partition_label(part), fontsize=8)
        ax.set_xlabel("label")
        ax.set_ylabel("client")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"samples per client and label ({ds})", fontsize=10)
    fig.tight_layout()
    return fig
