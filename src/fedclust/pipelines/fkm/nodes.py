"""FKM nodes: calibrate the upload noise, then run :func:`fedclust.clustering.fkm.run`."""

from __future__ import annotations

import logging
import math
import time

from fedclust.clustering import fkm
from fedclust.pipelines.privacy.nodes import check_privacy_params
from fedclust.privacy.accountants import calibrate_noise_multiplier

logger = logging.getLogger(__name__)


def calibrate(privacy: dict, train: dict, partition) -> dict:
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
    k = train.get("k") or dataset.n_classes
    mask = partition.client >= 0
    if not mask.all():
        raise ValueError("fkm expects every sample to belong to a client; the partition left some out")
    t0 = time.perf_counter()
    result = fkm.run(
        dataset.X,
        partition.client,
        int(k),
        rounds=int(train["rounds"]),
        clients_per_round=train.get("clients_per_round"),
        seed=int(seed),
        noise_multiplier=float(noise["noise_multiplier"]),
        clip=float(noise["clip"]) if noise["private"] else None,
        y=dataset.y,
    )
    result.info["wall_time_s"] = time.perf_counter() - t0
    result.info["rounds"] = int(train["rounds"])
    return result
