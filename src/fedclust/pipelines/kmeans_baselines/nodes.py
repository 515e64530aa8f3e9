"""Nodes for FZKM, DK++ and DKM.

In their own pipelines the baselines are calibrated by the accountant to the run's total
(epsilon, delta), like FKM (the fair comparison). The dp_fedc_grid pipeline instead reproduces the
paper's protocol (spec 000, A11): every baseline gets DP-FedC's per-round epsilon.

Not every configuration is a DP mechanism (amendment A-1): DKM always, DK++ with
``seeding_rounds > 0``, FZKM with ``local_iters > 1`` and any run with ``init: data`` release
private data without a bounded sensitivity. Such a run still adds the calibrated noise (to
reproduce the paper's protocol), but the calibration node logs a warning and records a note, and
the library run records a ``non_dp_release``, so privacy.json says epsilon = inf and names the step.
"""

from __future__ import annotations

import logging
from functools import partial, update_wrapper

from fedclust.clustering import dk_pp, dkm, fzkm
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import calibrate_per_round_noise

logger = logging.getLogger(__name__)

#: Gaussians released per round by each baseline. DK++: one in its DP variant (seeding_rounds = 0:
#: a counts round, then Lloyd rounds); its seeding rounds release two, but they are not DP anyway.
MECHANISMS_PER_ROUND = {"fzkm": 1, "dk_pp": 1, "dkm": 4}
MODULES = {"fzkm": fzkm, "dk_pp": dk_pp, "dkm": dkm}
_COMMON = ("rounds", "clients_per_round", "mechanism", "init", "init_domain")
_SPECIFIC = {
    "fzkm": ("fuzzifier", "local_iters", "server_iters", "server_restarts"),
    "dk_pp": ("seeding_rounds", "oversampling", "recluster_iters"),
    "dkm": ("coreset_size", "local_iters", "server_iters", "server_restarts"),
}
#: The library defaults of the parameters that decide whether a run is DP (used when null/absent).
_DEFAULTS = {"fzkm": {"local_iters": 1}, "dk_pp": {"seeding_rounds": 5}, "dkm": {}}


def non_dp_steps(method: str, train: dict) -> list[str]:
    """The steps of a *private* run of ``method`` with parameters ``train`` that are not DP
    mechanisms (empty when the run is DP). Mirrors the ``non_dp_release`` events of the library."""
    steps = []
    if train.get("init") == "data" and train.get("init_centroids") is None:
        steps.append(f"{method}: init=data makes the initial centroids k private data rows")
    opt = {**_DEFAULTS.get(method, {}), **{k: v for k, v in train.items() if v is not None}}
    if method == "fzkm" and int(opt["local_iters"]) > 1:
        steps.append(f"fzkm: local_iters={opt['local_iters']} > 1 has unbounded sensitivity (only local_iters=1 is DP)")
    if method == "dk_pp" and int(opt["seeding_rounds"]) > 0:
        steps.append(f"dk_pp: the k-means|| seeding ({opt['seeding_rounds']} rounds) uploads data-selected private "
                     "samples (only seeding_rounds=0 is DP)")
    if method == "dkm":
        steps.append("dkm: coreset points and local k-means centres are data-selected private values (no DP variant)")
    return steps


def flag_non_dp(noise: dict, method: str, train: dict) -> dict:
    """Add the notes and the warning for a private calibration of a run that is not DP."""
    if noise.get("private"):
        steps = non_dp_steps(method, train)
        if steps:
            msg = ("the run adds the calibrated noise but is NOT differentially private, so its report gives "
                   "epsilon = inf: " + "; ".join(steps))
            logger.warning("%s: %s", method, msg)
            noise["notes"] = list(noise.get("notes", ())) + [msg]
            noise["dp"] = False
        else:
            noise["dp"] = True
    return noise


def _calibrate(privacy: dict, train: dict, dataset, partition, *, method: str) -> dict:
    noise = calibrate_per_round_noise(privacy, train, mechanisms_per_round=MECHANISMS_PER_ROUND[method])
    return flag_non_dp(noise, method, train)


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
