"""Nodes for FZKM, DK++ and DKM.

In their own pipelines the baselines are calibrated by the accountant to the run's total
(epsilon, delta), like FKM (the fair comparison). The dp_fedc_grid pipeline instead reproduces the
paper's protocol (spec 000, A11): every baseline gets DP-FedC's per-round epsilon.
"""

from __future__ import annotations

from functools import partial, update_wrapper

from fedclust.clustering import dk_pp, dkm, fzkm
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import calibrate_per_round_noise

#: Gaussians released per round by each baseline (conservative for DK++, whose seeding rounds
#: release two and whose other rounds release one).
MECHANISMS_PER_ROUND = {"fzkm": 1, "dk_pp": 2, "dkm": 4}
MODULES = {"fzkm": fzkm, "dk_pp": dk_pp, "dkm": dkm}
_COMMON = ("rounds", "clients_per_round", "mechanism")
_SPECIFIC = {
    "fzkm": ("fuzzifier", "local_iters", "server_iters", "server_restarts"),
    "dk_pp": ("seeding_rounds", "oversampling", "recluster_iters"),
    "dkm": ("coreset_size", "local_iters", "server_iters", "server_restarts"),
}


def _calibrate(privacy: dict, train: dict, dataset, partition, *, method: str) -> dict:
    return calibrate_per_round_noise(privacy, train, mechanisms_per_round=MECHANISMS_PER_ROUND[method])


def _train(dataset, partition, noise: dict, train: dict, seed: int, *, method: str):
    require_all_assigned(partition, method)
    kw = {key: train[key] for key in _COMMON + _SPECIFIC[method] if train.get(key) is not None}
    kw["clients_per_round"] = train.get("clients_per_round") or int(partition.client.max()) + 1  # null = all
    if noise["private"]:
        kw.update(noise_multiplier=noise["noise_multiplier"], clip=noise["clip"])
    return run_timed(MODULES[method].run, dataset.X, partition.client, n_clusters(train, dataset), seed=int(seed), y=dataset.y, **kw)


def nodes_for(method: str):
    cal = update_wrapper(partial(_calibrate, method=method), _calibrate)
    tr = update_wrapper(partial(_train, method=method), _train)
    return cal, tr
