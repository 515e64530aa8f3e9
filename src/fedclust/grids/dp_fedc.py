"""The DP-FedC experiment grid.

Two parts, both over ``seeds`` with the same initial centroids (W^0) for every method of a seed
and privacy level:

* ``table1``: Table I layout, IID split, K = ``table1_K`` clients per round, constant Q2 = 5:
  FKM, FZKM, DK++, DKM and DP-FedC, each without DP and at eps_bar = ``table1_eps``. Following the
  paper's protocol every baseline gets DP-FedC's per-round epsilon (Theorem 3 inverted)
  through the classical Gaussian mechanism, with samples clipped to ``clip``.
* ``sweep``: DP-FedC with Q2^t = floor(Qhat/t)+1 for eps_bar in ``eps_bars`` (null = no DP),
  K in ``Ks`` and split in ``splits`` (iid; non-iid = two labels per client on MNIST/digits
  (shards), the k-means split elsewhere), as in Figs. 3-4.

DP-FedC runs once per penalty in ``rho_factors``; the tables have a ``rho_factor`` column ("-" for the baselines).

Privacy. Non-private cells are the paper's protocol: W^0 = k random data rows
(``init="data"``) and DP-FedC with its data-dependent constants. Private cells never read the data
for W^0 (uniform in ``init_domain``, default [0, 1], pulled into the clip ball), clip every sample
to the public bound ``clip`` (default sqrt(m) max|init_domain|, the largest row norm of the domain),
and DP-FedC uses its public constants (rho, mu_h, eta from the clip and the client sizes). DK++
runs its DP variant (no k-means|| seeding) under a budget; DKM has no DP variant and its noisy run
reports epsilon = inf. Every record carries the accountant's epsilon for the noise actually added
(the worst client's for DP-FedC).
"""

from __future__ import annotations

import math
import sys
import time
import warnings

import numpy as np
import pandas as pd

from fedclust.clustering import dp_fedc
from fedclust.clustering._common import default_init, initial_centroids
from fedclust.executors import without_execution
from fedclust.experiments import eps_label, records_frame, summarize
from fedclust.grids import run_grid
from fedclust.grids._data import load_cached, memo, stamp
from fedclust.metrics import scores_with_chance
from fedclust.partition import iid, kmeans_split, shards
from fedclust.privacy.accountants import epsilon as accountant_epsilon
from fedclust.privacy.mechanisms import classical_sigma
from fedclust.privacy.paper.dp_fedc import round_epsilon
from fedclust.registry import REGISTRY

#: the Table I methods (run functions from the registry)
METHODS = ("fkm", "fzkm", "dk_pp", "dkm", "dp_fedc")
METRICS = ["ACC", "NMI", "ARI", "epsilon_accountant", "wall_time_s", "ACC_chance", "at_chance"]


def _split(data, split: str, n_clients: int, seed: int) -> np.ndarray:
    if split == "iid":
        return iid(data.n_samples, n_clients, seed=seed).client
    if split == "noniid":
        if data.images is not None:  # MNIST / digits: two labels per client (shards)
            return shards(data.y, n_clients, labels_per_client=2, seed=seed).client
        return kmeans_split(data.X, n_clients, seed=seed).client
    raise ValueError(f"split must be 'iid' or 'noniid', got {split!r}")


#: the config keys that enumerate the cells (a cell carries its own value of them, not the lists)
AXES = (
    "seeds",
    "rho_factor",
    "rho_factors",
    "parts",
    "table1_K",
    "table1_eps",
    "table1_methods",
    "splits",
    "Ks",
    "eps_bars",
)


def cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """The grid's cells: one (part, method, penalty, eps_bar, K, split, seed) each, with the settings
    they share (``config`` less :data:`AXES` and the execution keys) and the data paths."""
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
    seeds = list(range(int(config.get("seeds", 5))))
    if "rho_factor" in config and "rho_factors" not in config:  # one penalty (older configs)
        rho_factors = [float(config["rho_factor"])]
    else:
        rho_factors = [float(r) for r in config.get("rho_factors", [1e-2, dp_fedc.PAPER_RHO_FACTOR])]
    parts = set(config.get("parts", ["table1", "sweep"]))
    out = []
    if "table1" in parts:
        K1, e1 = int(config.get("table1_K", 30)), float(config.get("table1_eps", 20.0))
        for method in config.get("table1_methods", list(METHODS)):
            for rf in rho_factors if method == "dp_fedc" else [None]:
                for eb in (None, e1):
                    for s in seeds:
                        out.append(
                            {
                                "part": "table1",
                                "method": method,
                                "rho_factor": rf,
                                "eps_bar": eb,
                                "K": K1,
                                "split": "iid",
                                "q2": 5,
                                "seed": s,
                            }
                        )
    if "sweep" in parts:
        for rf in rho_factors:
            for split in config.get("splits", ["iid", "noniid"]):
                for K in config.get("Ks", [10, 30, 100]):
                    for eb in config.get("eps_bars", [None, 20.0, 2.0]):
                        for s in seeds:
                            out.append(
                                {
                                    "part": "sweep",
                                    "method": "dp_fedc",
                                    "rho_factor": rf,
                                    "eps_bar": eb,
                                    "K": int(K),
                                    "split": split,
                                    "q2": "diminishing",
                                    "seed": s,
                                }
                            )
    return [{**c, "config": shared, "data_paths": dict(data_paths or {})} for c in out]


def _baseline_noise(c: dict, config: dict, client, N: int, K: int, R: int, b: int, delta: float) -> float:
    """A baseline's noise multiplier in a private cell: DP-FedC's per-round epsilon, given to the
    baseline through the classical Gaussian formula (0 without DP)."""
    eb = c["eps_bar"]
    if eb is None:
        return 0.0
    n_i = np.bincount(client, minlength=N)
    q2_max = 5 if c["q2"] == 5 else (int(config.get("Qhat", 10)) + 1)
    q = float(min(np.max(q2_max * np.minimum(b, n_i) / n_i), 0.99))
    eps_round = round_epsilon(eb, q, K / N, R)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # classical formula at eps >= 1, as the paper
        return classical_sigma(eps_round, delta, 1.0)


def _cell_metrics(res, y, delta: float) -> dict:
    """A run's scores (with their chance lines), the accountant's epsilon, the uploads and the final objective."""
    metrics = scores_with_chance(y, res.labels)
    metrics["epsilon_accountant"] = accountant_epsilon(res.dp_events, delta) if res.dp_events else math.inf
    metrics["uploaded_reals"] = res.uploaded_reals
    if "objective" in res.history:
        metrics["objective"] = res.history["objective"][-1]
    return metrics


def run_cell(cell: dict) -> list[dict]:
    """One cell's record (a pure function of ``cell``)."""
    t0 = time.perf_counter()
    config, data_paths = cell["config"], cell["data_paths"]
    c = {k: v for k, v in cell.items() if k not in ("config", "data_paths")}
    data = load_cached(config.get("dataset", "digits"), data_paths)
    X, y = data.X.astype(np.float64), data.y
    k = int(config.get("k") or data.n_classes)
    N = int(config.get("n_clients", 100))
    R = int(config.get("rounds", 100))
    delta = float(config.get("delta", 1e-4))
    G = float(config.get("G", 0.03))
    b = int(config.get("b", 50))
    domain = config.get("init_domain")
    clip = float(config.get("clip") or dp_fedc.domain_clip(X.shape[1], domain))  # public, never the data's
    client = memo(
        ("dp_fedc_split", data.name, stamp(data_paths.get(data.name)), c["split"], N, c["seed"]),
        lambda: _split(data, c["split"], N, c["seed"]),
    )
    K = min(c["K"], N)
    eb = c["eps_bar"]
    # the same initial points for every method of a seed: the paper's data rows without DP, a
    # public draw (no data read) in a private cell
    W0 = initial_centroids(X, k, c["seed"], init=default_init(eb is not None), clip=clip, domain=domain)
    common = dict(rounds=R, clients_per_round=K, seed=c["seed"], init_centroids=W0, y=y)
    if c["method"] == "dp_fedc":
        res = dp_fedc.run(
            X,
            client,
            k,
            q2=c["q2"],
            b=b,
            delta=delta,
            G=G if eb else None,
            eps_bar=eb,
            rho_factor=c["rho_factor"],
            clip=clip if eb else None,
            **common,
        )
    else:
        z = _baseline_noise(c, config, client, N, K, R, b, delta)
        extra = {"seeding_rounds": 0 if z > 0 else min(5, R - 2)} if c["method"] == "dk_pp" else {}
        run = REGISTRY[c["method"]].library_run
        res = run(X, client, k, noise_multiplier=z, clip=clip if z > 0 else None, **common, **extra)
    metrics = _cell_metrics(res, y, delta)
    hist = {key: res.history[key] for key in ("objective", "ACC", "NMI") if key in res.history}
    params = {k_: v for k_, v in c.items() if k_ != "method"}
    params.update(
        dataset=data.name,
        n_clients=N,
        rounds=R,
        k=k,
        clip=clip if eb is not None else None,
        init="data" if eb is None else "uniform_box",
    )
    if c["method"] == "dp_fedc":
        params.update(constants=res.info["constants"])
    rho = "" if c["rho_factor"] is None else f"/rho={c['rho_factor']:g}"
    metrics["wall_time_s"] = time.perf_counter() - t0
    return [
        {
            "name": f"{c['part']}/{c['method']}{rho}/{c['split']}/K={K}/eps={eps_label(eb)}/seed={c['seed']}",
            "tags": {
                "method": c["method"],
                "dataset": data.name,
                "partition": c["split"],
                "epsilon": eps_label(eb),
                "part": c["part"],
            },
            "params": params,
            "metrics": metrics,
            "history": hist,
        }
    ]


def run(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """Every cell (:func:`cells`, :func:`run_cell`) on ``config.executor``; ``run_options`` go to
    :func:`fedclust.grids.run_grid` (``store``, ``on_done``)."""
    return run_grid(sys.modules[__name__], config, data_paths, label="dp_fedc_grid", **run_options)


#: parameters that name a curve in the convergence plots (seeds are averaged)
CURVE_KEYS = ("part", "method", "rho_factor", "split", "K", "eps_bar")


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    frame = records_frame(records)
    frame["eps_bar"] = frame["eps_bar"].map(eps_label)
    if "rho_factor" not in frame.columns:
        frame["rho_factor"] = None
    frame["rho_factor"] = frame["rho_factor"].map(lambda r: "-" if r is None or r != r else f"{float(r):g}")
    out = {}
    t1 = frame[frame["part"] == "table1"]
    if not t1.empty:
        out["table1"] = summarize(t1, ["method", "rho_factor", "eps_bar"], METRICS)
    sw = frame[frame["part"] == "sweep"]
    if not sw.empty:
        out["sweep"] = summarize(sw, ["rho_factor", "split", "K", "eps_bar"], METRICS)
        out["sweep"]["method"] = "dp_fedc"
    return out
