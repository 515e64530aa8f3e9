"""The CFL-MGD experiment grid (spec 004, section 4.5; issue 9): CFL-MGD, IFCA and FedAvg with
shared seeds on rotated data, in the layout of the paper's Table 2 (method x data set, mean ± std
of test accuracy over seeds), plus client-clustering ACC/NMI."""

from __future__ import annotations

import pandas as pd

from fedclust.clustered_fl import FederatedTensors
from fedclust.experiments import records_frame, run_cells, summarize
from fedclust.grids._data import load
from fedclust.partition import rotation
from fedclust.registry.clustered_fl import run_clustered

METRICS = ["test_accuracy", "client_ACC", "client_NMI", "wall_time_s"]
CURVE_KEYS = ("dataset", "method")


def run(config: dict, data_paths: dict | None = None) -> list[dict]:
    from fedclust.clustered_fl.models import MLP, ifca_cnn

    datasets = config.get("datasets", ["digits"])
    methods = config.get("methods", ["cfl_mgd", "ifca", "fedavg"])
    seeds = range(int(config.get("seeds", 3)))
    rot = config.get("rotation") or {}
    common = dict(config.get("train") or {})
    model_spec = common.pop("model", {"type": "mlp", "hidden": 32})
    cells = [(d, s, m) for d in datasets for s in seeds for m in methods]
    cache: dict = {}

    def run_cell(cell):
        ds_name, seed, method = cell
        if (ds_name, seed) not in cache:
            data = load(ds_name, data_paths)
            rd = rotation(data.images, data.y, seed=seed, **{k: v for k, v in rot.items() if v is not None})
            cache[(ds_name, seed)] = (rd, FederatedTensors.from_rotated(rd))
        rd, tensors = cache[(ds_name, seed)]
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
        hist = {h: res.history[h] for h in ("test_accuracy", "train_loss", "client_ACC") if res.history.get(h)}
        return {
            "name": f"{ds_name}/{method}/seed={seed}",
            "tags": {"method": method, "dataset": ds_name, "partition": f"rotation({k} groups)", "epsilon": "inf"},
            "params": {"dataset": ds_name, "method": method, "seed": seed, **{f"train.{a}": b for a, b in kw.items()}},
            "metrics": metrics,
            "history": hist,
        }

    return run_cells(cells, run_cell, label="cfl_grid")


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    frame = records_frame(records)
    summary = summarize(frame, ["dataset", "method"], METRICS)
    table2 = summary.pivot_table(index="method", columns="dataset", values="test_accuracy", aggfunc="first", sort=False).reset_index()
    return {"table2_test_accuracy": table2, "all_metrics": summary}
