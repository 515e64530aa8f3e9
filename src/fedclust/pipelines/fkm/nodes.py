"""FKM nodes: calibrate the upload noise, then run :func:`fedclust.clustering.fkm.run`."""

from __future__ import annotations

import logging
import math
from fedclust.clustering import fkm
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import check_privacy_params
from fedclust.privacy.accountants import calibrate_noise_multiplier

logger = logging.getLogger(__name__)


def calibrate(privacy: dict, train: dict, partition, dataset) -> dict:
    """Noise multiplier for the per-cluster sums and counts from the target (epsilon, delta).

    Sample-level DP, add/remove neighbours, no amplification claimed for client sampling (a
    sample's client may upload in every round), composed over ``rounds`` releases.
    """
    eps, delta = check_privacy_params(privacy)
    clip = float(train.get("clip", 1.0))
    base = {"mechanism": "gaussian", "unit": "sample", "delta": delta, "clip": clip, "epsilon_target": eps}
    if eps is None:
        return {**base, "private": False, "noise_multiplier": 0.0, "noise_std": 0.0}
    z = calibrate_noise_multiplier(
        eps, delta, steps=int(train["rounds"]), sampling="none", accountant=privacy.get("accountant", "rdp")
    )
    sens = math.sqrt(clip**2 + 1.0)
    logger.info("fkm: epsilon=%s delta=%s -> noise multiplier %.4g (std %.4g)", eps, delta, z, z * sens)
    return {**base, "private": True, "noise_multiplier": float(z), "sensitivity": sens, "noise_std": float(z * sens)}


def train(dataset, partition, noise: dict, train: dict, seed: int):
    """Federated Lloyd on the partitioned data; k defaults to the number of classes."""
    require_all_assigned(partition, "fkm")
    return run_timed(
        fkm.run,
        dataset.X,
        partition.client,
        n_clusters(train, dataset),
        rounds=int(train["rounds"]),
        clients_per_round=train.get("clients_per_round"),
        seed=int(seed),
        noise_multiplier=float(noise["noise_multiplier"]),
        clip=float(noise["clip"]) if noise["private"] else None,
        y=dataset.y,
    )
