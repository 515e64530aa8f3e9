"""Partitioning nodes: who holds which sample, and a report on it."""

from __future__ import annotations

import logging

import matplotlib

matplotlib.use("Agg")

from fedclust.data import Dataset
from fedclust.errors import DataError
from fedclust.partition import LABEL_SCHEMES, make_partition
from fedclust.partition.report import heatmap_figure, partition_stats

logger = logging.getLogger(__name__)


def split_clients(dataset: Dataset, partition: dict, seed: int):
    params = dict(partition)
    scheme = params.pop("scheme")
    n_clients = params.pop("n_clients")
    options = params.pop("options", None) or {}
    if scheme in LABEL_SCHEMES and not dataset.labelled:
        raise DataError(
            f"partition scheme {scheme!r} splits by class label, but data set {dataset.name!r} has no labels: "
            "use partition.scheme=iid or kmeans, or name the label column with dataset.options.label"
        )
    part = make_partition(
        scheme, X=dataset.X, y=dataset.y, images=dataset.images, n_clients=n_clients, seed=seed, **params, **options
    )
    return part


def report_partition(partition, dataset: Dataset):
    stats = partition_stats(partition, dataset.y)
    logger.info(
        "partition: %d clients, sizes %s..%s, labels per client %s..%s",
        stats.get("n_clients"),
        stats.get("size_min"),
        stats.get("size_max"),
        stats.get("labels_min"),
        stats.get("labels_max"),
    )
    return stats, heatmap_figure(partition, dataset.y)
