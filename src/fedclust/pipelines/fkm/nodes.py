"""FKM nodes: calibrate the upload noise, then run :func:`fedclust.clustering.fkm.run`."""

from __future__ import annotations

import logging
import math
from fedclust.clustering import fkm
from fedclust.pipelines.kmeans_baselines.nodes import flag_non_dp
from fedclust.pipelines.methods import n_clusters, require_all_assigned, run_timed
from fedclust.pipelines.privacy.nodes import calibrate_per_round_noise

logger = logging.getLogger(__name__)


def calibrate(privacy: dict, train: dict, dataset, partition) -> dict:
    """Noise multiplier for the per-cluster sums and counts from the target (epsilon, delta).

    Sample-level DP, add/remove neighbours, no amplification claimed for client sampling (a
    sample's client may upload in every round), composed over ``rounds`` releases. The upload
    ``(sums, counts)`` has L2 sensitivity sqrt(clip^2 + 1). A private run with ``init: data``
    (private rows as W^0) is flagged: a warning now, epsilon = inf in its report.
    """
    noise = calibrate_per_round_noise(privacy, train)
    if noise["private"]:
        noise["sensitivity"] = math.sqrt(float(noise["clip"]) ** 2 + 1.0)
        noise["noise_std"] = noise["noise_multiplier"] * noise["sensitivity"]
        logger.info("fkm: epsilon=%s -> noise multiplier %.4g (std %.4g)", noise["epsilon_target"], noise["noise_multiplier"], noise["noise_std"])
    return flag_non_dp(noise, "fkm", train)


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
        init=train.get("init"),
        init_domain=train.get("init_domain"),
        y=dataset.y,
    )
