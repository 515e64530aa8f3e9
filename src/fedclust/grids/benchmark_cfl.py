"""The benchmark's clustered-FL half: its methods, its cells and their records in the benchmark's
shape (:mod:`fedclust.grids.benchmark` runs both halves on one executor).

The non-private methods (CFL-MGD, IFCA, FedAvg) run the cells of :mod:`fedclust.grids.cfl` with the
engine's defaults of the method registry; RR-Cluster and the DP baselines run the cells of
:mod:`fedclust.grids.rr`, calibrated to the benchmark's budgets (client-level, the run's delta).
"""

from __future__ import annotations

import math

from fedclust.experiments import eps_label
from fedclust.grids._data import load_cached
from fedclust.registry import REFERENCES, REGISTRY

#: the data-clustering methods (the registry's, then its centralized references)
DATA_METHODS = tuple(name for name, spec in REGISTRY.items() if spec.family == "clustering") + tuple(REFERENCES)


def check_methods(config: dict) -> list[str]:
    """The data-clustering methods of ``config["methods"]`` (default: all of them); the list may also
    name clustered-FL methods (:data:`CFL_METHODS`), which :func:`clustered_fl_methods` picks up."""
    methods = list(config.get("methods", DATA_METHODS))
    bad = [m for m in methods if m not in DATA_METHODS and m not in CFL_METHODS]
    if bad:
        raise ValueError(f"benchmark.config.methods: unknown {bad}; valid: {list(DATA_METHODS) + list(CFL_METHODS)}")
    return [m for m in methods if m in DATA_METHODS]


def cell_run_name(dataset: str, partition: str, eps: str, method: str, seed) -> str:
    """The one name of every benchmark cell's run (both halves): ``digits/iid/eps=4/fkm/seed=0``."""
    return f"{dataset}/{partition}/eps={eps}/{method}/seed={seed}"


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
    check_methods(config)
    return [m for m in config.get("methods", ()) if m in CFL_METHODS]


def _settings(config: dict) -> dict:
    """The clustered-FL half's settings: ``config["clustered_fl"]``, where a method setting left out
    is the registry's default (RR-Cluster's rounds, steps, clip and B; the engine's share of clients
    and MLP), and the benchmark's seeds and delta."""
    cfg = dict(config.get("clustered_fl") or {})
    engine, rr_cfg = REGISTRY["cfl_mgd"].config(), REGISTRY["rr_cluster"].config()
    return {
        "rotation": {
            "n_groups": int(cfg.get("n_groups", 4)),
            "n_clients": int(cfg.get("n_clients", 100)),
            "samples_per_client": int(cfg.get("samples_per_client", 14)),
            "test_per_client": int(cfg.get("test_per_client", 3)),
        },
        "train": {
            "rounds": int(cfg.get("rounds", rr_cfg.rounds)),
            "lr": float(cfg.get("lr", rr_cfg.lr)),
            "local_steps": int(cfg.get("local_steps", rr_cfg.local_steps)),
            "participation": float(cfg.get("participation", engine.participation)),
            "eval_every": engine.eval_every,
        },
        "public_train": {
            "beta": engine.beta,
            "model": {**engine.model, "hidden": int(cfg.get("hidden", engine.model["hidden"]))},
        },
        "clip": float(cfg.get("clip", rr_cfg.clip)),
        "B": int(cfg.get("B", rr_cfg.B)),
        "epsilons": cfg.get("epsilons", [None, 8.0]),
        "datasets": cfg.get("datasets", ["digits"]),
        "regime": cfg.get("regime") or "many_per_cluster",
        "seeds": int(config.get("seeds", 2)),
        "delta": float(config.get("delta", 1e-5)),
    }


def _public_cells(ds: str, methods: list[str], s: dict, data_paths, partition: str) -> list[dict]:
    """The non-private methods on data set ``ds``: cells of :mod:`fedclust.grids.cfl`, and one
    ``cfl_na`` cell for the finite budgets (no private variant)."""
    # the clustered-FL grids (and torch) load only when the benchmark has a clustered-FL part
    from fedclust.grids import cfl

    sub = {
        "datasets": [ds],
        "methods": methods,
        "seeds": s["seeds"],
        "rotation": s["rotation"],
        "train": {**s["train"], **s["public_train"]},
    }
    out = [{"kind": "cfl", "cell": c} for c in cfl.cells(sub, data_paths)]
    finite = [e for e in s["epsilons"] if e is not None]
    if finite:
        out.append(
            {
                "kind": "cfl_na",
                "dataset": ds,
                "epsilons": finite,
                "methods": methods,
                "seeds": s["seeds"],
                "partition": partition,
            }
        )
    return out


def _private_cells(ds: str, methods: list[str], s: dict, data_paths, partition: str) -> list[dict]:
    """RR-Cluster and the DP baselines on data set ``ds``, calibrated to every budget (cells of
    :mod:`fedclust.grids.rr`)."""
    # the clustered-FL grids (and torch) load only when the benchmark has a clustered-FL part
    from fedclust.grids import rr

    rotation, train = s["rotation"], s["train"]
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
        "clip": s["clip"],
        "delta": s["delta"],
        "epsilons": s["epsilons"],
        "seeds": s["seeds"],
        "methods": methods,
        "Bs": [s["B"]],
    }
    return [{"kind": "rr", "cell": c, "partition": partition} for c in rr.cells(sub, data_paths)]


def _regime_cells(s: dict, data_paths) -> list[dict]:
    """A regime of rr_grid by name (its data, clients, budgets, thresholds and methods) with the
    benchmark's seeds and delta, at one RR threshold per table row: the preset's largest B (about its
    clients per cluster and round); the preset is applied here, so rr.cells gets a plain config."""
    # the clustered-FL grids (and torch) load only when the benchmark has a clustered-FL part
    from fedclust.grids import rr

    regime, train = s["regime"], s["train"]
    preset = rr.apply_regime(
        {
            "regime": regime,
            "seeds": s["seeds"],
            "delta": s["delta"],
            "lr": train["lr"],
            "local_steps": train["local_steps"],
            "hidden": [],
            "clip": s["clip"],
        }
    )
    preset.update(Bs=[max(preset["Bs"])], regime=None)
    label = f"rotation({regime}: {preset['n_clients']} clients, q={preset['participation']:g}, B={preset['Bs'][0]})"
    return [{"kind": "rr", "cell": c, "partition": label} for c in rr.cells(preset, data_paths)]


def clustered_fl_cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """The clustered-FL half's cells: every method of :func:`clustered_fl_methods` (none: no cell)
    on the same rotated clients, budgets and seeds, with the settings of ``config["clustered_fl"]``.

    Non-private methods (CFL-MGD, IFCA, FedAvg) run at epsilon = inf (cells of :mod:`fedclust.grids.cfl`)
    and are reported as not applicable under a finite budget (one ``cfl_na`` cell per data set);
    RR-Cluster and the DP baselines are calibrated to it (client-level, the run's delta) through the
    cells of :mod:`fedclust.grids.rr`.
    """
    # the clustered-FL grids (and torch) load only when the benchmark has a clustered-FL part
    from fedclust.grids import rr

    methods = clustered_fl_methods(config)
    if not methods:
        return []
    s = _settings(config)
    if s["regime"] not in rr.REGIMES:
        raise ValueError(f"benchmark.config.clustered_fl.regime must be one of {list(rr.REGIMES)}, got {s['regime']!r}")
    partition = f"rotation({s['rotation']['n_groups']} groups)"
    public = [m for m in methods if m not in CFL_PRIVATE]
    private = [m for m in methods if m in CFL_PRIVATE]
    out: list[dict] = []
    for ds in s["datasets"]:
        if public:
            out += _public_cells(ds, public, s, data_paths, partition)
        if private and s["regime"] == "many_per_cluster":
            out += _private_cells(ds, private, s, data_paths, partition)
    if private and s["regime"] != "many_per_cluster":
        out += _regime_cells(s, data_paths)  # a regime preset runs once, on its own data
    return out


def run_clustered_fl_cell(cell: dict) -> list[dict]:
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
