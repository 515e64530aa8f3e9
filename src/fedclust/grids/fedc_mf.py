"""The FedCAvg / FedCGds experiment grid.

For every split in ``splits`` (``iid`` = syn_unf / balanced, ``kmeans`` = syn_noniid, ``shards`` and
``power_law`` = the MNIST two-digit splits) and every trial, all runs in ``runs`` start from the
same one of the common random initializations (:func:`fedclust.clustering.fedc_mf.make_init`,
seed = trial). A run is ``{method, label, Q1, Q2, q_hat, clients_per_round, continuation, ...}``
with method in fedc_avg, fedc_gds, fedc_palm, sncp (centralized) and kmeanspp (pooled); any other key
goes to the solver, e.g. ``rho_trigger: epoch`` for FedCGds with m < P under SNCP.

Histories: objective, cumulative uploaded reals (``comm_reals``) and, for clustering runs, ACC,
so that the plots show objective vs round, objective vs communication, and ACC vs rounds.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from fedclust.clustering import fedc_mf
from fedclust.executors import without_execution
from fedclust.experiments import records_frame, summarize
from fedclust.grids import run_grid
from fedclust.grids._data import load_cached, memo, stamp
from fedclust.metrics import scores_with_chance
from fedclust.partition import make_partition

METRICS = ["ACC", "NMI", "ARI", "objective", "comm_reals", "rounds_run", "wall_time_s", "ACC_chance", "at_chance"]
CURVE_KEYS = ("split", "label")
_RUNNERS = {
    "fedc_avg": fedc_mf.run_fedcavg,
    "fedc_gds": fedc_mf.run_fedcgds,
    "fedc_palm": fedc_mf.run_fedcpalm,
}
_RESERVED = ("method", "label")


#: the config keys that enumerate the cells (a cell carries its own value of them)
AXES = ("splits", "trials", "runs")


def cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """One cell per (split, trial, run spec), with the shared settings and the data paths."""
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
    runs = config.get("runs") or [{"method": "fedc_gds"}, {"method": "fedc_avg"}]
    return [
        {"split": split, "trial": t, "spec": dict(r), "config": shared, "data_paths": dict(data_paths or {})}
        for split in config.get("splits", ["iid", "kmeans"])
        for t in range(int(config.get("trials", 2)))
        for r in runs
    ]


def run_cell(cell: dict) -> list[dict]:
    """One run's record (a pure function of ``cell``)."""
    t0 = time.perf_counter()
    config, data_paths = cell["config"], cell["data_paths"]
    split, trial, spec = cell["split"], cell["trial"], cell["spec"]
    data = load_cached(config.get("dataset", "digits"), data_paths, **(config.get("dataset_options") or {}))
    X, y = data.X.astype(np.float64), data.y
    k = int(config.get("k") or data.n_classes)
    P = int(config.get("n_clients", 100))
    rounds = int(config.get("rounds", 100))

    def build():
        opts = {"labels_per_client": 2} if split in ("shards", "power_law") else {}
        if split == "kmeans":
            opts["n_init"] = 1
        part = make_partition(split, X=X, y=y, n_clients=P, seed=trial, **opts)
        return part.client, fedc_mf.make_init(X, k, seed=trial)

    client, init = memo(
        (
            "fedc_mf",
            config.get("dataset", "digits"),
            config.get("dataset_options"),
            stamp(data_paths.get(config.get("dataset", "digits"))),
            split,
            trial,
            P,
            k,
        ),
        build,
    )
    method = spec["method"]
    kw = {key: v for key, v in spec.items() if key not in _RESERVED and v is not None}
    label = spec.get("label") or method
    if method == "kmeanspp":
        res = fedc_mf.run_kmeanspp(X, k, seed=trial, y=y)
    elif method == "sncp":
        res = fedc_mf.run_sncp(X, k, seed=trial, init=init, y=y, rounds=int(kw.pop("rounds", rounds)), **kw)
    else:
        kw.setdefault("rounds", rounds)
        res = _RUNNERS[method](X, client, k, seed=trial, init=init, y=y, **kw)
    metrics = scores_with_chance(y, res.labels)
    hist = {key: res.history[key] for key in ("objective", "comm_reals", "ACC", "rho") if key in res.history}
    metrics["objective"] = hist["objective"][-1] if hist.get("objective") else float("nan")
    metrics["comm_reals"] = float(res.uploaded_reals)
    metrics["rounds_run"] = float(len(hist.get("objective", [])))
    metrics["wall_time_s"] = time.perf_counter() - t0
    return [
        {
            "name": f"{split}/{label}/trial={trial}",
            "tags": {"method": method, "dataset": data.name, "partition": split, "epsilon": "inf"},
            "params": {
                "split": split,
                "label": label,
                "trial": trial,
                "n_clients": P,
                **{k_: v for k_, v in spec.items() if k_ != "label"},
            },
            "metrics": metrics,
            "history": hist,
        }
    ]


def run(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """Every cell on ``config.executor`` (:func:`fedclust.grids.run_grid`)."""
    return run_grid(sys.modules[__name__], config, data_paths, label="fedc_mf_grid", **run_options)


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    frame = records_frame(records)
    return {"runs": summarize(frame, ["split", "label", "method"], METRICS)}
