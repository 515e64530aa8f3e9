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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Cell:
    """What every sweep of one (data set, trial) cell reads: the data (features ``X0``, labels ``y``,
    ``k`` classes), the clients' split, and the shared FedSC settings."""

    ds_name: str
    trial: int
    X0: np.ndarray
    y: np.ndarray
    k: int
    client: np.ndarray
    rounds: int
    n_init: int
    graph: str
    config: dict

    def fedsc(self, X, client, **kw):
        """:func:`fedclust.clustering.fedsc.run` with the cell's seed, rounds, restarts and graph."""
        return fedsc.run(
            X, client, self.k, seed=self.trial, rounds=self.rounds, n_init=self.n_init, graph=self.graph, **kw
        )

    def record(self, method: str, sweep: str, labels, params: dict, history=None, metrics=None) -> dict:
        """The record of one method of a sweep of this cell."""
        return _record(method, sweep, self.ds_name, self.trial, self.y, labels, params, history, metrics=metrics)


def _noise_sweep(c: _Cell) -> list[dict]:
    """The ``betas`` sweep: k-means, SC, DSC, FedSC (with the attack on C) and one-client FedSC on
    data with Gaussian noise of std ``beta std(X)``."""
    out = []
    X0, trial = c.X0, c.trial
    for beta in c.config.get("betas", [0.0]):
        X = X0 + beta * X0.std() * stream(trial, "noise").standard_normal(X0.shape) if beta > 0 else X0
        r = spectral.mean_pairwise_distance(X, rng=stream(trial, "data"))
        d = spectral.eigen_rank(X, r, rng=stream(trial, "data"))
        if c.config.get("d_max"):
            d = min(d, int(c.config["d_max"]))
        p = {"beta": beta}
        for method, fn in (
            ("kmeans", partial(fedsc.centralized_kmeans, X, c.k, seed=trial)),
            ("sc", partial(spectral.spectral_clustering, X, c.k, seed=trial, r=r, n_init=c.n_init, graph=c.graph)),
            ("dsc", partial(dsc.run, X, c.client, c.k, seed=trial)),
        ):
            res, t = _timed(fn)
            out.append(c.record(method, "noise", res.labels, p, metrics={"wall_time_s": t}))
        res, t = _timed(partial(c.fedsc, X, c.client, r=r, d=d, attack=True))
        metrics = {
            "reconstruction_error": res.info.get("reconstruction_error"),
            "d": d,
            "wall_time_s": t,
            "uploaded_reals": res.uploaded_reals,
        }
        out.append(c.record("fedsc", "noise", res.labels, p, res.history, metrics=metrics))
        out.append(c.record("attack_on_c", "noise", res.info["attack_on_c_labels"], p))
        one, t = _timed(partial(c.fedsc, X, np.zeros(len(c.y), dtype=np.int64), r=r, d=d))
        out.append(c.record("fedsc_P1", "noise", one.labels, p, metrics={"wall_time_s": t}))
    return out


def _d_sweep(c: _Cell, r0: float) -> list[dict]:
    """The ``d_values`` sweep of FedSC's dictionary size (None: the eigenvalue rule)."""
    out = []
    for d in c.config.get("d_values", [None]):
        res = c.fedsc(c.X0, c.client, r=r0, d=d, d_max=c.config.get("d_max"))
        metrics = {"reconstruction_error": res.info.get("reconstruction_error"), "d_used": res.info["d"]}
        out.append(c.record("fedsc", "d", res.labels, {"d": "rule" if d is None else d}, metrics=metrics))
    return out


def _factor_sweep(c: _Cell, r0: float) -> list[dict]:
    """The ``alphas`` sweep of the factor noise (std relative to the factors': not DP)."""
    out = []
    for az, ac in c.config.get("alphas", []):
        res = c.fedsc(c.X0, c.client, r=r0, d_max=c.config.get("d_max"), z_noise_alpha=az, c_noise_alpha=ac)
        metrics = {"reconstruction_error": res.info.get("reconstruction_error")}
        out.append(c.record("fedsc", "factors", res.labels, {"alpha_z": az, "alpha_c": ac}, metrics=metrics))
    return out


def _clients_sweep(c: _Cell, r0: float) -> list[dict]:
    """The ``P_values`` sweep of the number of clients."""
    out = []
    for P_ in c.config.get("P_values", []):
        cl = iid(c.X0.shape[0], int(P_), seed=c.trial).client
        res = c.fedsc(c.X0, cl, r=r0, d_max=c.config.get("d_max"))
        out.append(c.record("fedsc", "P", res.labels, {"P": int(P_)}))
    return out


def run_cell(cell: dict) -> list[dict]:
    """Every method and sweep of one (data set, trial) cell (a pure function of ``cell``)."""
    ds_name, trial, source = cell["dataset"], cell["trial"], cell["source"]
    config = cell["config"]
    graph = config["graph"]
    P = int(config.get("n_clients", 8))
    sweeps = set(config.get("sweeps", ["noise", "d", "factors", "P"]))
    data = memo(("fedsc_data", source, stamp(source.get("path"))), lambda: prepare_dataset(seed=0, **source), "data")
    X0, y, k = data.X.astype(np.float64), data.y, data.n_classes
    c = _Cell(
        ds_name=ds_name,
        trial=trial,
        X0=X0,
        y=y,
        k=k,
        client=iid(X0.shape[0], P, seed=trial).client,
        rounds=int(config.get("rounds", 20)),
        n_init=int(config.get("n_init", 10)),
        graph=graph,
        config=config,
    )
    out = _noise_sweep(c) if "noise" in sweeps else []
    r0 = spectral.mean_pairwise_distance(X0, rng=stream(trial, "data"))
    for name, sweep in (("d", _d_sweep), ("factors", _factor_sweep), ("P", _clients_sweep)):
        if name in sweeps:
            out += sweep(c, r0)
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
