"""Similarity (k-means) partition: one client per k-means cluster of the data.

The non-IID split of DP-FedC for TCGA and of
FedCAvg/FedCGds ``syn_noniid``. Clients are highly unbalanced and nearly
label-pure. sklearn's KMeans never returns an empty cluster, so no client is empty.
"""

from __future__ import annotations

import numpy as np

from fedclust.options import check_int
from fedclust.partition._checks import check_n_clients
from fedclust.partition.base import Partition
from fedclust.rng import stream


def kmeans_split(X, n_clients: int, seed: int = 0, n_init: int = 10, max_iter: int = 300) -> Partition:
    """Client of sample j = KMeans cluster of row j of ``X`` (rows are samples).

    The KMeans ``random_state`` is drawn from the "partition" stream of ``seed`` and recorded in
    ``meta["random_state"]`` so that the clustering can be reproduced with sklearn directly.
    """
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (samples x features), got shape {X.shape}")
    n_clients = check_n_clients(n_clients, X.shape[0])
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    random_state = int(stream(seed, "partition").integers(0, 2**31 - 1))
    from sklearn.cluster import KMeans  # on first use: sklearn costs a second at every kedro start

    km = KMeans(n_clusters=n_clients, n_init=n_init, max_iter=max_iter, random_state=random_state)
    client = km.fit_predict(X)
    return Partition(
        client=client,
        n_clients=n_clients,
        meta={
            "scheme": "kmeans",
            "seed": int(seed),
            "n_clients": n_clients,
            "n_init": n_init,
            "random_state": random_state,
            "inertia": float(km.inertia_),
        },
    )
