"""Nodes shared by the clustered-FL pipelines.

``rotate`` turns the loaded image data set into clients in rotation groups (the same for every
clustered-FL method of a run); each method then trains on it, and ``evaluate`` reports test
accuracy (every test client uses its lowest-loss model) and client-clustering ACC/NMI.
"""

from __future__ import annotations

import logging

import numpy as np

from fedclust.data import Dataset
from fedclust.metrics import client_chance
from fedclust.partition import rotation
from fedclust.partition.report import partition_stats

logger = logging.getLogger(__name__)


def rotate(dataset: Dataset, data: dict, seed: int):
    if dataset.images is None:
        raise ValueError(
            f"clustered FL rotates images, but dataset {dataset.name!r} has none: use digits, mnist, fashion_mnist or cifar10"
        )
    opts = {k: v for k, v in data.items() if v is not None}
    rd = rotation(dataset.images, dataset.y, seed=int(seed), **opts)
    logger.info("rotation: %d clients in %d groups, angles %s", rd.group.size, len(rd.angles), list(rd.angles))
    return rd


def rotation_report(rotated) -> dict:
    stats = partition_stats(rotated.train_partition(), rotated.y_train)
    stats["angles"] = [float(a) for a in rotated.angles]
    stats["clients_per_group"] = [int((rotated.group == g).sum()) for g in range(len(rotated.angles))]
    return stats


def evaluate_clustered(result, rotated=None) -> dict:
    """Final metrics over ALL clients (the engine's final evaluation; per-round histories may
    cover only the round's sampled clients), with the chance line of the client clustering:
    ``client_ACC_chance`` / ``client_NMI_chance`` of a random assignment with the same cluster sizes,
    and ``client_at_chance`` (1.0 when ``client_ACC`` is within noise of it)."""
    final = dict(result.info.get("final") or result.final_metrics())
    out = {
        k: float(v) for k, v in final.items() if isinstance(v, (int, float, np.floating, np.integer)) and k != "round"
    }
    for key in ("wall_time_s", "rounds"):
        if key in result.info:
            out[key] = float(result.info[key])
    if "client_ACC" in out:
        out.update(
            client_chance(getattr(rotated, "group", None), getattr(result, "assignment", None), out["client_ACC"])
        )
    return out
