"""IFCA, CFL-MGD and FedAvg nodes (non-private: their privacy report says epsilon = inf)."""

from __future__ import annotations

import time
from functools import partial, update_wrapper

from fedclust.clustered_fl import cfl_mgd, fedavg, ifca
from fedclust.pipelines.clustered_fl.nodes import tensors_and_model
from fedclust.pipelines.privacy.nodes import non_private_calibration

_ENGINE_KEYS = ("rounds", "lr", "lr_decay", "local_steps", "batch_size", "participation", "clients_per_round",
                "eval_every", "init_min_fraction", "init_max_restarts", "max_chunk_mb")
_SPECIFIC = {"cfl_mgd": ("option", "beta", "ga_normalization"), "ifca": ("aggregation",), "fedavg": ("beta",)}


def calibrate(privacy: dict, train: dict, rotated, *, method: str) -> dict:
    return non_private_calibration(privacy, method, "client")


def train(rotated, noise: dict, train: dict, seed: int, *, method: str):
    data, model = tensors_and_model(rotated, train)
    kw = {key: train[key] for key in _ENGINE_KEYS + _SPECIFIC[method] if train.get(key) is not None}
    t0 = time.perf_counter()
    if method == "fedavg":
        res = fedavg.run(data, model, seed=int(seed), **kw)
    else:
        k = int(train.get("k") or len(rotated.angles))
        res = (cfl_mgd if method == "cfl_mgd" else ifca).run(data, model, k, seed=int(seed), **kw)
    res.info["wall_time_s"] = time.perf_counter() - t0
    res.info["rounds"] = int(kw.get("rounds", 300))
    return res


def nodes_for(method: str):
    return (
        update_wrapper(partial(calibrate, method=method), calibrate),
        update_wrapper(partial(train, method=method), train),
    )
