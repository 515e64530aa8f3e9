"""The FedSC experiment grid (spec 001, section 5.5; issue 6).

Cells, per data set and trial (seed), with P iid clients:

* ``noise``: data noise beta in ``betas`` (X + beta * std(X) * N(0, 1), seen by every method):
  K-means, SC, DSC, FedSC, the attack on C and FedSC with P = 1;
* ``d``: FedSC on clean data for every dictionary size in ``d_values`` (null = the 0.99 rule);
* ``factors``: FedSC with factor noise (alpha_z, alpha_c) in ``alphas`` (the paper's Table 5 sweep: the
  noise std is alpha times the std of the factor, a scale read from the data, so these runs are not
  DP and are tagged epsilon = inf; the calibrated private variants are ``kedro run --pipeline=fedsc``
  with ``privacy.epsilon`` set);
* ``P``: FedSC with P in ``P_values`` clients.

Every method in one trial shares the kernel width r and d, computed once on that trial's data.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from fedclust.clustering import dsc, fedsc, spectral
from fedclust.experiments import records_frame, run_cells, summarize
from fedclust.grids._data import load
from fedclust.metrics import clustering_scores
from fedclust.partition import iid
from fedclust.rng import stream

METRICS = ["ACC", "NMI", "NMI_paper", "ARI", "wall_time_s"]


def _scores(y, labels) -> dict:
    s = clustering_scores(y, labels)
    s["NMI_paper"] = fedsc.nmi_paper(y, labels)
    return s


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _record(method, sweep, ds, trial, y, labels, extra_params=None, history=None, tags=None, metrics=None):
    m = _scores(y, labels)
    m.update(metrics or {})
    params = {"sweep": sweep, "dataset": ds, "trial": trial, **(extra_params or {})}
    name = f"{method}/{ds}/{sweep}/" + "/".join(f"{k}={v}" for k, v in (extra_params or {}).items()) + f"/trial={trial}"
    return {
        "name": name,
        "tags": {"method": method, "dataset": ds, "sweep": sweep, "epsilon": "inf", **(tags or {})},
        "params": params,
        "metrics": m,
        "history": history or {},
    }


def run(config: dict, data_paths: dict | None = None) -> list[dict]:
    datasets = config.get("datasets", ["fedsc_iris"])
    trials = int(config.get("trials", 3))
    P = int(config.get("n_clients", 8))
    rounds = int(config.get("rounds", 20))
    n_init = int(config.get("n_init", 10))
    sweeps = set(config.get("sweeps", ["noise", "d", "factors", "P"]))
    cells = [(ds, t) for ds in datasets for t in range(trials)]
    data_cache: dict[str, object] = {}

    def run_cell(cell):
        ds_name, trial = cell
        if ds_name not in data_cache:
            data_cache[ds_name] = load(ds_name, data_paths)
        data = data_cache[ds_name]
        X0, y, k = data.X.astype(np.float64), data.y, data.n_classes
        client = iid(X0.shape[0], P, seed=trial).client
        out = []
        for beta in config.get("betas", [0.0]) if "noise" in sweeps else []:
            X = X0 + beta * X0.std() * stream(trial, "noise").standard_normal(X0.shape) if beta > 0 else X0
            r = spectral.mean_pairwise_distance(X, rng=stream(trial, "data"))
            d = spectral.eigen_rank(X, r, rng=stream(trial, "data"))
            if config.get("d_max"):
                d = min(d, int(config["d_max"]))
            p = {"beta": beta}
            for method, fn in (
                ("kmeans", lambda: fedsc.centralized_kmeans(X, k, seed=trial)),
                ("sc", lambda: spectral.spectral_clustering(X, k, seed=trial, r=r, n_init=n_init)),
                ("dsc", lambda: dsc.run(X, client, k, seed=trial)),
            ):
                res, t = _timed(fn)
                out.append(_record(method, "noise", ds_name, trial, y, res.labels, p, metrics={"wall_time_s": t}))
            res, t = _timed(lambda: fedsc.run(X, client, k, seed=trial, rounds=rounds, r=r, d=d, attack=True, n_init=n_init))
            out.append(_record("fedsc", "noise", ds_name, trial, y, res.labels, p, res.history, metrics={
                "reconstruction_error": res.info.get("reconstruction_error"), "d": d, "wall_time_s": t,
                "uploaded_reals": res.uploaded_reals}))
            out.append(_record("attack_on_c", "noise", ds_name, trial, y, res.info["attack_on_c_labels"], p))
            one, t = _timed(lambda: fedsc.run(X, np.zeros(len(y), dtype=np.int64), k, seed=trial, rounds=rounds, r=r, d=d, n_init=n_init))
            out.append(_record("fedsc_P1", "noise", ds_name, trial, y, one.labels, p, metrics={"wall_time_s": t}))
        r0 = spectral.mean_pairwise_distance(X0, rng=stream(trial, "data"))
        for d in config.get("d_values", [None]) if "d" in sweeps else []:
            res = fedsc.run(X0, client, k, seed=trial, rounds=rounds, r=r0, d=d, d_max=config.get("d_max"), n_init=n_init)
            out.append(_record("fedsc", "d", ds_name, trial, y, res.labels, {"d": "rule" if d is None else d},
                               metrics={"reconstruction_error": res.info.get("reconstruction_error"), "d_used": res.info["d"]}))
        for az, ac in config.get("alphas", []) if "factors" in sweeps else []:
            res = fedsc.run(X0, client, k, seed=trial, rounds=rounds, r=r0, d_max=config.get("d_max"),
                            z_noise_alpha=az, c_noise_alpha=ac, n_init=n_init)
            out.append(_record("fedsc", "factors", ds_name, trial, y, res.labels, {"alpha_z": az, "alpha_c": ac},
                               metrics={"reconstruction_error": res.info.get("reconstruction_error")}))
        for P_ in config.get("P_values", []) if "P" in sweeps else []:
            cl = iid(X0.shape[0], int(P_), seed=trial).client
            res = fedsc.run(X0, cl, k, seed=trial, rounds=rounds, r=r0, d_max=config.get("d_max"), n_init=n_init)
            out.append(_record("fedsc", "P", ds_name, trial, y, res.labels, {"P": int(P_)}))
        return {"name": f"{ds_name}/trial={trial}", "children": out}

    nested = run_cells(cells, run_cell, label="fedsc_grid")
    return [child for rec in nested for child in rec["children"]]


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    """Mean ± std tables: the method comparison per (data, beta), and one table per other sweep."""
    frame = records_frame(records)
    out = {}
    for sweep, keys in (("noise", ["beta"]), ("d", ["d"]), ("factors", ["alpha_z", "alpha_c"]), ("P", ["P"])):
        part = frame[frame["sweep"] == sweep]
        if part.empty:
            continue
        out[sweep] = summarize(part, ["dataset", *keys, "method"], METRICS)
    return out
