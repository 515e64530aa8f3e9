"""Centralized references: clustering on the pooled data, with no clients and no privacy.

They are no federated methods (no pipeline, no ``<name>.train`` group), but the benchmark reports
them next to the federated ones as the accuracy a federation could hope for. Like the methods, they
are run from here, never from a table of the benchmark's own. Plain Python (no Kedro).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedclust.registry.helpers import run_timed


@dataclass(frozen=True)
class Reference:
    """A centralized reference: ``run(dataset, seed) -> ClusteringResult`` on all the data at once."""

    name: str
    run: Callable
    what: str


def _kmeans(dataset, seed: int):
    # a reference's method loads when it runs: the registry loads at every kedro start
    from fedclust.clustering import fedsc

    return run_timed(fedsc.centralized_kmeans, dataset.X, int(dataset.n_classes), seed=int(seed), n_init=10)


def _spectral(dataset, seed: int):
    # a reference's method loads when it runs: the registry loads at every kedro start
    from fedclust.clustering import spectral

    return run_timed(spectral.spectral_clustering, dataset.X, int(dataset.n_classes), seed=int(seed), n_init=10)


REFERENCES: dict[str, Reference] = {
    "kmeans": Reference("kmeans", _kmeans, "k-means on the pooled data (10 restarts)"),
    "sc": Reference("sc", _spectral, "spectral clustering on the pooled data (10 restarts)"),
}
