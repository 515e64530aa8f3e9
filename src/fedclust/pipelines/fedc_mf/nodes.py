"""FedCAvg / FedCGds nodes. Neither method adds privacy noise: with a privacy budget set, the run
is still non-private, and its privacy report says so (epsilon = inf), so that a comparison under a
budget shows it as "not private" rather than silently skipping it."""

from __future__ import annotations

from functools import partial, update_wrapper

from fedclust.clustering import fedc_mf
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import non_private_calibration

_KEYS = {
    "fedc_avg": ("rounds", "Q1", "Q2", "q_hat", "gamma", "step_rule", "lw", "d_schedule", "rho", "nu", "continuation",
                 "rho_growth", "rho_tol", "tol", "q_hat_restart"),
    "fedc_gds": ("rounds", "Q1", "Q2", "clients_per_round", "gamma", "step_rule", "rho", "nu", "continuation",
                 "rho_growth", "rho_tol", "tol", "rho_trigger"),
}
_RUN = {"fedc_avg": fedc_mf.run_fedcavg, "fedc_gds": fedc_mf.run_fedcgds}


def _calibrate(privacy: dict, train: dict, dataset, partition, *, method: str) -> dict:
    return non_private_calibration(privacy, method, "sample")


def _train(dataset, partition, noise: dict, train: dict, seed: int, *, method: str):
    require_all_assigned(partition, method)
    kw = {key: train[key] for key in _KEYS[method] if train.get(key) is not None}
    result = run_timed(_RUN[method], dataset.X, partition.client, n_clusters(train, dataset), seed=int(seed), y=dataset.y, **kw)
    result.info["metrics"] = {"rho_final": float(result.info.get("rho_final", float("nan")))} if "rho_final" in result.info else {}
    return result


def nodes_for(method: str):
    return (
        update_wrapper(partial(_calibrate, method=method), _calibrate),
        update_wrapper(partial(_train, method=method), _train),
    )
