"""Nodes shared by the clustered-FL pipelines.

``rotate`` turns the loaded image data set into clients in rotation groups (the same for every
clustered-FL method of a run); each method then trains on it, and ``evaluate`` reports test
accuracy (every test client uses its lowest-loss model) and client-clustering ACC/NMI.
"""

from __future__ import annotations

import logging

from fedclust.clustered_fl import FederatedTensors
from fedclust.clustered_fl.models import MLP, LinearRegression, ifca_cnn
from fedclust.data import Dataset
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


def build_model(spec: dict, d_in: int, n_classes: int, image_shape=None):
    kind = spec.get("type", "mlp")
    if kind == "mlp":
        return MLP(d_in=d_in, hidden=spec.get("hidden", 200), n_classes=n_classes)
    if kind == "cnn":
        if image_shape is None:
            raise ValueError("model.type=cnn needs image data")
        ch = image_shape[0] if len(image_shape) == 3 else 1
        return ifca_cnn(in_channels=ch, image_size=image_shape[-1], n_classes=n_classes)
    if kind == "linear":
        return LinearRegression(d_in)
    raise ValueError(f"model.type must be mlp, cnn or linear, got {kind!r}")


def tensors_and_model(rotated, train: dict):
    data = FederatedTensors.from_rotated(rotated)
    n_classes = int(max(rotated.y_train.max(), rotated.y_test.max())) + 1
    model = build_model(train.get("model") or {}, data.d, n_classes, tuple(rotated.images_train.shape[1:]))
    return data, model


def evaluate_clustered(result) -> dict:
    """Final metrics over ALL clients (the engine's final evaluation; per-round histories may
    cover only the round's sampled clients)."""
    import numpy as np

    final = dict(result.info.get("final") or result.final_metrics())
    out = {k: float(v) for k, v in final.items() if isinstance(v, (int, float, np.floating, np.integer)) and k != "round"}
    for key in ("wall_time_s", "rounds"):
        if key in result.info:
            out[key] = float(result.info[key])
    return out
