"""The FedSC experiment grid.

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

Data: ``datasets`` is any list of entries, each

* a data set name of :mod:`fedclust.data.registry` (``fedsc_iris``; file-based ones read from
  ``data_paths.<name>``; ``mat`` is labelled by the stem of its file);
* a path to a ``.mat`` file or a glob pattern (``data/01_raw/mine/*.mat``), relative to the project
  root: every file matched is one data set, labelled by its file name (samples as columns of ``X``,
  labels in ``Label``, as the FedSC files);
* a dict ``{path: ..., label: ..., scale: ..., options: {x_key: Xn}}`` (or ``name:`` instead of ``path:``).

``scale`` (``minmax``, ``standardize``, ``none``) is the preprocessing of every data set (an entry's own
``scale`` wins); ``graph`` the Stage II / SC affinity graph (``min_connected_k`` by default, ``paper``, ``mst``;
:func:`fedclust.clustering.spectral.build_graph`), used by SC and every FedSC cell.
"""

from __future__ import annotations

import glob
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from fedclust.clustering import dsc, fedsc, spectral
from fedclust.data.registry import prepare_dataset
from fedclust.executors import without_execution
from fedclust.experiments import records_frame, summarize
from fedclust.grids import run_grid
from fedclust.grids._data import memo, stamp
from fedclust.metrics import scores_with_chance
from fedclust.partition import iid
from fedclust.rng import stream

METRICS = ["ACC", "NMI", "NMI_paper", "ARI", "wall_time_s", "ACC_chance", "at_chance"]


def _scores(y, labels) -> dict:
    s = scores_with_chance(y, labels)
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


_GLOB = set("*?[")


def resolve_datasets(entries, data_paths: dict | None = None, scale: str = "minmax") -> dict[str, dict]:
    """``fedsc_grid.config.datasets`` -> ``{label: prepare_dataset keyword arguments}`` (see the module
    docstring). Raises ValueError naming the entry for a pattern that matches nothing, a missing file,
    an unknown key or two data sets with the same label."""
    if isinstance(entries, (str, dict)):
        entries = [entries]
    out: dict[str, dict] = {}

    def add(label, kw, entry):
        if label in out:
            raise ValueError(
                f"fedsc_grid.config.datasets: two data sets are labelled {label!r} (entry {entry!r}); "
                "give one of them a 'label'"
            )
        out[label] = kw

    for entry in entries or []:
        if isinstance(entry, dict):
            unknown = set(entry) - {"name", "path", "label", "scale", "options"}
            if unknown:
                raise ValueError(
                    f"fedsc_grid.config.datasets: unknown key(s) {sorted(unknown)} in {entry!r} "
                    "(allowed: name, path, label, scale, options)"
                )
            name = entry.get("name") or "mat"
            path = entry.get("path") or (data_paths or {}).get(name)
            if name == "mat" and path is None:
                raise ValueError(f"fedsc_grid.config.datasets: entry {entry!r} needs a 'path' (a .mat file)")
            label = entry.get("label") or (Path(path).stem if name == "mat" else name)
            add(
                label,
                {
                    "name": name,
                    "path": path,
                    "scale": entry.get("scale", scale),
                    "options": dict(entry.get("options") or {}),
                },
                entry,
            )
        elif isinstance(entry, str) and (entry.endswith(".mat") or _GLOB & set(entry)):
            hits = sorted(glob.glob(entry)) if _GLOB & set(entry) else [entry]
            if not hits:
                raise ValueError(
                    f"fedsc_grid.config.datasets: no file matches {entry!r} (relative to the project root)"
                )
            for h in hits:
                if not Path(h).is_file():
                    raise ValueError(f"fedsc_grid.config.datasets: {h!r} is not a file")
                add(Path(h).stem, {"name": "mat", "path": h, "scale": scale, "options": {}}, entry)
        elif isinstance(entry, str):
            path = (data_paths or {}).get(entry)
            label = Path(path).stem if entry == "mat" and path else entry
            add(label, {"name": entry, "path": path, "scale": scale, "options": {}}, entry)
        else:
            raise ValueError(
                f"fedsc_grid.config.datasets: entries are names, .mat paths, glob patterns or dicts, got {entry!r}"
            )
    if not out:
        raise ValueError("fedsc_grid.config.datasets must name at least one data set")
    return out


#: the config keys that enumerate the cells (a cell carries its own value of them)
AXES = ("datasets", "trials")


def cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """One cell per (data set, trial): the data set's resolved source (:func:`resolve_datasets`) and
    the shared settings (the graph checked and filled in)."""
    scale = config.get("scale") or "minmax"
    graph = spectral._check_graph(config.get("graph") or "min_connected_k")
    sources = resolve_datasets(config.get("datasets", ["fedsc_iris"]), data_paths, scale)
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
    shared.update(scale=scale, graph=graph)
    return [
        {"dataset": ds, "trial": t, "source": src, "config": shared}
        for ds, src in sources.items()
        for t in range(int(config.get("trials", 3)))
    ]


def run_cell(cell: dict) -> list[dict]:
    """Every method and sweep of one (data set, trial) cell (a pure function of ``cell``)."""
    ds_name, trial, source = cell["dataset"], cell["trial"], cell["source"]
    config = cell["config"]
    graph = config["graph"]
    P = int(config.get("n_clients", 8))
    rounds = int(config.get("rounds", 20))
    n_init = int(config.get("n_init", 10))
    sweeps = set(config.get("sweeps", ["noise", "d", "factors", "P"]))
    data = memo(("fedsc_data", source, stamp(source.get("path"))), lambda: prepare_dataset(seed=0, **source), "data")
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
            ("kmeans", partial(fedsc.centralized_kmeans, X, k, seed=trial)),
            ("sc", partial(spectral.spectral_clustering, X, k, seed=trial, r=r, n_init=n_init, graph=graph)),
            ("dsc", partial(dsc.run, X, client, k, seed=trial)),
        ):
            res, t = _timed(fn)
            out.append(_record(method, "noise", ds_name, trial, y, res.labels, p, metrics={"wall_time_s": t}))
        res, t = _timed(
            partial(
                fedsc.run, X, client, k, seed=trial, rounds=rounds, r=r, d=d, attack=True, n_init=n_init, graph=graph
            )
        )
        out.append(
            _record(
                "fedsc",
                "noise",
                ds_name,
                trial,
                y,
                res.labels,
                p,
                res.history,
                metrics={
                    "reconstruction_error": res.info.get("reconstruction_error"),
                    "d": d,
                    "wall_time_s": t,
                    "uploaded_reals": res.uploaded_reals,
                },
            )
        )
        out.append(_record("attack_on_c", "noise", ds_name, trial, y, res.info["attack_on_c_labels"], p))
        one, t = _timed(
            partial(
                fedsc.run,
                X,
                np.zeros(len(y), dtype=np.int64),
                k,
                seed=trial,
                rounds=rounds,
                r=r,
                d=d,
                n_init=n_init,
                graph=graph,
            )
        )
        out.append(_record("fedsc_P1", "noise", ds_name, trial, y, one.labels, p, metrics={"wall_time_s": t}))
    r0 = spectral.mean_pairwise_distance(X0, rng=stream(trial, "data"))
    for d in config.get("d_values", [None]) if "d" in sweeps else []:
        res = fedsc.run(
            X0, client, k, seed=trial, rounds=rounds, r=r0, d=d, d_max=config.get("d_max"), n_init=n_init, graph=graph
        )
        out.append(
            _record(
                "fedsc",
                "d",
                ds_name,
                trial,
                y,
                res.labels,
                {"d": "rule" if d is None else d},
                metrics={"reconstruction_error": res.info.get("reconstruction_error"), "d_used": res.info["d"]},
            )
        )
    for az, ac in config.get("alphas", []) if "factors" in sweeps else []:
        res = fedsc.run(
            X0,
            client,
            k,
            seed=trial,
            rounds=rounds,
            r=r0,
            d_max=config.get("d_max"),
            z_noise_alpha=az,
            c_noise_alpha=ac,
            n_init=n_init,
            graph=graph,
        )
        out.append(
            _record(
                "fedsc",
                "factors",
                ds_name,
                trial,
                y,
                res.labels,
                {"alpha_z": az, "alpha_c": ac},
                metrics={"reconstruction_error": res.info.get("reconstruction_error")},
            )
        )
    for P_ in config.get("P_values", []) if "P" in sweeps else []:
        cl = iid(X0.shape[0], int(P_), seed=trial).client
        res = fedsc.run(
            X0, cl, k, seed=trial, rounds=rounds, r=r0, d_max=config.get("d_max"), n_init=n_init, graph=graph
        )
        out.append(_record("fedsc", "P", ds_name, trial, y, res.labels, {"P": int(P_)}))
    for rec in out:  # what every cell shares: the data's scaling and the graph
        rec["params"].update(scale=source["scale"], graph=graph)
        rec["tags"]["graph"] = graph
    return out


def run(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """Every cell on ``config.executor`` (:func:`fedclust.grids.run_grid`)."""
    return run_grid(sys.modules[__name__], config, data_paths, label="fedsc_grid", **run_options)


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
