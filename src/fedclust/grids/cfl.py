"""The CFL-MGD experiment grid: CFL-MGD, IFCA and FedAvg with
shared seeds on rotated data, in the layout of the paper's Table 2 (method x data set, mean ± std
of test accuracy over seeds), plus client-clustering ACC/NMI."""

from __future__ import annotations

import sys
import time

import pandas as pd

from fedclust.clustered_fl import FederatedTensors
from fedclust.executors import without_execution
from fedclust.experiments import records_frame, summarize
from fedclust.grids import run_grid
from fedclust.grids._data import load_cached, memo, stamp
from fedclust.metrics import client_chance
from fedclust.partition import rotation
from fedclust.registry.clustered_fl import run_clustered

METRICS = ["test_accuracy", "client_ACC", "client_NMI", "client_ACC_chance", "client_at_chance", "wall_time_s"]
CURVE_KEYS = ("dataset", "method")


#: the config keys that enumerate the cells (a cell carries its own value of them)
AXES = ("datasets", "methods", "seeds")


def cells(config: dict, data_paths: dict | None = None) -> list[dict]:
    """One cell per (data set, seed, method), with the shared settings and the data paths."""
    shared = {k: v for k, v in without_execution(config).items() if k not in AXES}
    return [
        {"dataset": d, "seed": s, "method": m, "config": shared, "data_paths": dict(data_paths or {})}
        for d in config.get("datasets", ["digits"])
        for s in range(int(config.get("seeds", 3)))
        for m in config.get("methods", ["cfl_mgd", "ifca", "fedavg"])
    ]


def run_cell(cell: dict) -> list[dict]:
    """One (data set, seed, method) run's record (a pure function of ``cell``)."""
    # the models (torch) load when a cell builds one
    from fedclust.clustered_fl.models import MLP, ifca_cnn

    t0 = time.perf_counter()
    config, data_paths = cell["config"], cell["data_paths"]
    ds_name, seed, method = cell["dataset"], cell["seed"], cell["method"]
    rot = config.get("rotation") or {}
    common = dict(config.get("train") or {})
    model_spec = common.pop("model", {"type": "mlp", "hidden": 32})

    def build():
        data = load_cached(ds_name, data_paths)
        rd = rotation(data.images, data.y, seed=seed, **{k: v for k, v in rot.items() if v is not None})
        return rd, FederatedTensors.from_rotated(rd)

    rd, tensors = memo(("cfl_rotation", ds_name, stamp(data_paths.get(ds_name)), seed, rot), build)
    n_classes = int(rd.y_train.max()) + 1
    if model_spec.get("type", "mlp") == "cnn":
        shape = rd.images_train.shape[1:]
        model = ifca_cnn(in_channels=shape[0] if len(shape) == 3 else 1, image_size=shape[-1], n_classes=n_classes)
    else:
        model = MLP(d_in=tensors.d, hidden=model_spec.get("hidden", 200), n_classes=n_classes)
    kw = dict(common)
    kw.update((config.get("method_train") or {}).get(method) or {})
    k = len(rd.angles)
    if method != "cfl_mgd":
        kw.pop("beta", None)  # IFCA and FedAvg have no momentum
    res = run_clustered(method, tensors, model, k, seed=seed, **kw)  # the registry's dispatch
    final = res.info["final"]
    metrics = {m: float(final[m]) for m in ("test_accuracy", "client_ACC", "client_NMI") if m in final}
    if "client_ACC" in metrics:
        metrics.update(client_chance(rd.group, getattr(res, "assignment", None), metrics["client_ACC"], seed=seed))
    hist = {h: res.history[h] for h in ("test_accuracy", "train_loss", "client_ACC") if res.history.get(h)}
    metrics["wall_time_s"] = time.perf_counter() - t0
    return [
        {
            "name": f"{ds_name}/{method}/seed={seed}",
            "tags": {"method": method, "dataset": ds_name, "partition": f"rotation({k} groups)", "epsilon": "inf"},
            "params": {"dataset": ds_name, "method": method, "seed": seed, **{f"train.{a}": b for a, b in kw.items()}},
            "metrics": metrics,
            "history": hist,
        }
    ]


def run(config: dict, data_paths: dict | None = None, **run_options) -> list[dict]:
    """Every cell on ``config.executor`` (:func:`fedclust.grids.run_grid`)."""
    return run_grid(sys.modules[__name__], config, data_paths, label="cfl_grid", **run_options)


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    frame = records_frame(records)
    summary = summarize(frame, ["dataset", "method"], METRICS)
    table2 = summary.pivot_table(
        index="method", columns="dataset", values="test_accuracy", aggfunc="first", sort=False
    ).reset_index()
    return {"table2_test_accuracy": table2, "all_metrics": summary}
