"""The RR-Cluster experiment grid.

Settings ``balanced`` (4 rotation groups, 0/90/180/270) and ``imbalanced`` (2:1:1, 0/90/180),
each client's images used once (``reuse=False``, RR-Cluster's construction). For every setting,
epsilon (null = no DP), method and seed: test accuracy, client-clustering ACC, moved updates per
round, the smallest noisy cluster before RR (mean over rounds), and the accounted epsilon.
RR-Cluster runs for every B in ``Bs`` (B = 0 is DP-IFCA), the baselines once. Every method is
calibrated by the accountant to its replace-one sensitivity under fixed-size sampling
(RR-Cluster and DP-IFCA add the same noise, so when the identifier noise already keeps every cluster
>= B, RR-Cluster equals DP-IFCA exactly). Method ``dp_ifca_literal`` is DP-IFCA with the paper's
literal noise (``C_theta``): its ``epsilon_accountant`` is the larger epsilon that noise really
spends. Tables: the paper's Table 1 layout (method x setting/epsilon) and Table 4 layout
(clustering accuracy, epsilon x B). Private records carry the trust model ``central``: the server
clips, adds the noise and samples the clients itself.

Two regimes (``regime``): ``many_per_cluster`` (the config as given; with tens of clients per
cluster and round the identifier noise never pushes a cluster below B, so RR-Cluster moves no
update and equals DP-IFCA) and ``few_per_cluster``, the paper's own regime (:data:`REGIMES`: 1,000
MNIST clients, 3 % per round, 7.5 per cluster, so noisy clusters do fall below B; the paper's
epsilons 2, 4 and 8). Measured map of the two: ``docs/methods/rr_cluster.md``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import pandas as pd

from fedclust.clustered_fl import FederatedTensors
from fedclust.clustered_fl.models import MLP
from fedclust.executors import without_execution
from fedclust.experiments import eps_label, records_frame, summarize
from fedclust.grids import run_grid
from fedclust.grids._data import load_cached, memo, stamp
from fedclust.metrics import client_chance
from fedclust.partition import rotation
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.registry.clustered_fl import rr_base, rr_regime, rr_sigmas, run_rr

METRICS = [
    "test_accuracy",
    "client_ACC",
    "client_NMI",
    "client_ACC_chance",
    "client_at_chance",
    "mean_moved",
    "min_noisy_cluster",
    "expected_clients_per_cluster",
    "rr_moves_updates",
    "epsilon_accountant",
    "wall_time_s",
]
CURVE_KEYS = ("setting", "method", "epsilon")
SETTINGS = {"balanced": {"n_groups": 4}, "imbalanced": {"n_groups": 3, "ratios": [2, 1, 1], "angles": [0, 90, 180]}}


#: the config keys that enumerate the cells (a cell carries its own value of them)
AXES = ("settings", "epsilons", "seeds", "methods", "Bs")

#: presets of ``regime``; their values replace the config's
REGIMES = {
    "many_per_cluster": {},
    "few_per_cluster": {
        "dataset": "mnist",
        "n_clients": 1000,
        "samples_per_client": 7,
        "test_per_client": 1,
        "participation": 0.03,
        "rounds": 60,
        "settings": ["balanced"],
        "epsilons": [None, 2.0, 4.0, 8.0],
        "Bs": [2, 4, 7],
        "methods": ["dp_ifca", "rr_cluster"],
    },
}


def apply_regime(config: dict) -> dict:
    """``config`` with its ``regime`` preset applied (:data:`REGIMES`)."""
    regime = config.get("regime") or "many_per_cluster"
    if regime not in REGIMES:
        raise ValueError(f"rr_grid.config.regime must be one of {list(REGIMES)}, got {regime!r}")
    return {**config, **REGIMES[regime], "regime": regime}


def cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """One cell per (setting, epsilon, seed, method, B), with the shared settings and the data paths."""
    config = apply_regime(config)
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
    out = []
    for setting in config.get("settings", ["balanced", "imbalanced"]):
        for eps in config.get("epsilons", [None, 8.0, 4.0, 2.0]):
            for seed in range(int(config.get("seeds", 2))):
                for method in config.get("methods", ["dp_ifca", "rr_cluster", "dp_fedavg"]):
                    for B in config.get("Bs", [4, 8]) if method == "rr_cluster" else [0]:
                        out.append(
                            {
                                "setting": setting,
                                "epsilon": eps,
                                "seed": seed,
                                "method": method,
                                "B": int(B),
                                "config": shared,
                                "data_paths": dict(data_paths or {}),
                            }
                        )
    return out


@dataclass(frozen=True)
class _RRSettings:
    """A cell's shared settings: clients ``M``, participation ``q``, rounds ``T``, ``delta``, the
    local training keywords ``train``, the clip and calibration bound, the samples and test samples
    per client and the base method."""

    M: int
    q: float
    T: int
    delta: float
    train: dict
    clip: float
    bound: str
    spc: int
    tpc: int
    base: str

    @classmethod
    def of(cls, config: dict) -> _RRSettings:
        """The settings of ``config`` with their defaults."""
        T, q = int(config.get("rounds", 30)), float(config.get("participation", 0.25))
        train = dict(
            lr=float(config.get("lr", 0.1)),
            local_steps=int(config.get("local_steps", 5)),
            rounds=T,
            participation=q,
            eval_every=int(config.get("eval_every", 5)),
        )
        return cls(
            M=int(config.get("n_clients", 200)),
            q=q,
            T=T,
            delta=float(config.get("delta", 1e-3)),
            train=train,
            clip=float(config.get("clip", 0.3)),
            bound=config.get("calibration_bound", "accountant"),
            spc=int(config.get("samples_per_client", 8)),
            tpc=int(config.get("test_per_client", 2)),
            base=config.get("base", "ifca"),
        )


def _rr_metrics(res, rd, cell: dict, st: _RRSettings, k: int) -> dict:
    """A run's metrics: final accuracy and client clustering (with its chance line), the updates moved,
    the regime, the smallest noisy cluster and the accountant's epsilon."""
    method, seed = cell["method"], cell["seed"]
    final = res.info["final"]
    moved = res.history.get("n_moved") or [0.0]
    metrics = {m: float(final[m]) for m in ("test_accuracy", "client_ACC", "client_NMI") if m in final}
    if "client_ACC" in metrics:
        metrics.update(client_chance(rd.group, getattr(res, "assignment", None), metrics["client_ACC"], seed=seed))
    metrics["mean_moved"] = float(sum(moved) / len(moved))
    if rr_base(method, st.base) is not None:  # where the run sits on RR's regime map (clustered methods)
        metrics.update(rr_regime(st.q, st.M, k, moved))
    before = res.history.get("sizes_before_rr") or []
    if before:
        metrics["min_noisy_cluster"] = float(sum(min(z) for z in before) / len(before))
    metrics["epsilon_accountant"] = accounted(res.dp_events, st.delta) if res.dp_events else math.inf
    return metrics


def run_cell(cell: dict) -> list[dict]:
    """One run's record (a pure function of ``cell``)."""
    t0 = time.perf_counter()
    config, data_paths = cell["config"], cell["data_paths"]
    setting, eps, seed, method, B = cell["setting"], cell["epsilon"], cell["seed"], cell["method"], cell["B"]
    ds = config.get("dataset", "digits")
    data = load_cached(ds, data_paths)
    st = _RRSettings.of(config)
    hidden = config.get("hidden", [])

    def build():
        rd = rotation(
            data.images,
            data.y,
            n_clients=st.M,
            samples_per_client=st.spc,
            test_per_client=st.tpc,
            seed=seed,
            reuse=False,
            **SETTINGS[setting],
        )
        return rd, FederatedTensors.from_rotated(rd)

    rd, tensors = memo(("rr_rotation", ds, stamp(data_paths.get(ds)), setting, seed, st.M, st.spc, st.tpc), build)
    k = len(rd.angles)
    model = MLP(
        tensors.d, hidden if method != "dp_fedper" else (config.get("fedper_hidden", 16),), int(rd.y_train.max()) + 1
    )
    private = eps is not None
    # the RR dispatch of the registry (the same as the rr_cluster pipeline's)
    rho_s = float(config.get("rho_s", 0.5))
    sigmas = rr_sigmas(method, eps, st.delta, st.q, st.T, st.M, rho_s=rho_s, base=st.base, bound=st.bound)
    res = run_rr(
        method,
        tensors,
        model,
        k,
        sigmas=sigmas,
        clip=st.clip if private else None,
        B=B,
        base=st.base,
        C_s=float(config.get("C_s", 0.1)),
        mu=float(config.get("mu", 0.1)),
        **dict(st.train, seed=seed),
    )
    label = f"rr_cluster(B={B})" if method == "rr_cluster" else method
    metrics = _rr_metrics(res, rd, cell, st, k)
    hist = {h: res.history[h] for h in ("test_accuracy", "n_moved") if res.history.get(h)}
    metrics["wall_time_s"] = time.perf_counter() - t0
    return [
        {
            "name": f"{setting}/eps={eps_label(eps)}/{label}/seed={seed}",
            "tags": {
                "method": method,
                "dataset": data.name,
                "partition": f"rotation-{setting}",
                "epsilon": eps_label(eps),
                "trust_model": "none" if eps is None else "central",
            },
            "params": {
                "setting": setting,
                "epsilon": eps_label(eps),
                "label": label,
                "B": B,
                "seed": seed,
                "n_clients": st.M,
                "participation": st.q,
                "rounds": st.T,
                "clip": st.clip,
            },
            "metrics": metrics,
            "history": hist,
        }
    ]


def run(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """Every cell on ``config.executor`` (:func:`fedclust.grids.run_grid`)."""
    return run_grid(sys.modules[__name__], config, data_paths, label="rr_grid", **run_options)


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    frame = records_frame(records)
    summary = summarize(frame, ["setting", "epsilon", "label"], METRICS)
    table1 = summary.pivot_table(
        index="label", columns=["setting", "epsilon"], values="test_accuracy", aggfunc="first", sort=False
    ).reset_index()
    rr = summary[summary["label"].str.startswith(("rr_cluster", "dp_ifca"))]  # dp_ifca and dp_ifca_literal
    table4 = rr.pivot_table(
        index=["setting", "epsilon"], columns="label", values="client_ACC", aggfunc="first", sort=False
    ).reset_index()
    moved = rr.pivot_table(
        index=["setting", "epsilon"], columns="label", values="mean_moved", aggfunc="first", sort=False
    ).reset_index()
    return {
        "table1_test_accuracy": table1,
        "table4_client_ACC": table4,
        "moved_updates_per_round": moved,
        "all_metrics": summary,
    }


def privacy_utility_figure(records: list[dict], chance: float | None = None):
    """Test accuracy (mean ± std over seeds) against the accounted epsilon, one line per method
    label, one panel per setting; ``chance`` (1 / number of classes) as a dashed line."""
    # plots (matplotlib) load only when the grid draws its figures
    from fedclust.plots import privacy_utility_figure as figure

    return figure(
        records,
        metric="test_accuracy",
        series="label",
        facets=("setting",),
        chance=chance,
        title="RR-Cluster grid, privacy-utility: test accuracy against the accounted ε (client-level)",
    )


def rounds_figure(records: list[dict]):
    """Test accuracy per evaluation round across budgets, one panel per method label (first setting)."""
    # plots (matplotlib) load only when the grid draws its figures
    from fedclust.plots import rounds_by_epsilon_figure

    return rounds_by_epsilon_figure(
        records,
        "test_accuracy",
        series="label",
        focus=("setting",),
        title="RR-Cluster grid: test accuracy per evaluation round across ε",
    )
