"""The data of the one-machine deployment: scikit-learn's digits (shipped with it, no download).

Every process derives its rows from public rules and its own node config, so the SuperLink's
ServerApp and the SuperNodes agree without exchanging data: pixels scaled to [0, 1] by their
public maximum (16), a held-out ``server_fraction`` of the rows as the server's public sample
(:func:`fedclust.clustering.fed_dp_kmeans.holdout_rows`), and the other rows split IID over
``num-partitions`` clients (:func:`fedclust.partition.iid`). In a real federation each data owner
would read its own rows here instead.
"""

from __future__ import annotations

import functools

import numpy as np

from fedclust.clustering.fed_dp_kmeans import holdout_rows
from fedclust.data.builtin import load_digits
from fedclust.partition import iid

SERVER_FRACTION = 0.05


@functools.lru_cache(maxsize=2)
def scaled() -> tuple[np.ndarray, np.ndarray]:
    """Digits' rows in [0, 1] and their labels."""
    d = load_digits()
    return np.asarray(d.X, dtype=np.float64) / float(d.meta["pixel_max"]), np.asarray(d.y)


def split(num_partitions: int, seed: int = 0, server_fraction: float = SERVER_FRACTION):
    """The server's rows and every row's client (-1 for the server's rows)."""
    X, _ = scaled()
    server = holdout_rows(X.shape[0], server_fraction, seed)
    rest = np.setdiff1d(np.arange(X.shape[0]), server)
    client = np.full(X.shape[0], -1, dtype=np.int64)
    client[rest] = iid(rest.size, num_partitions, seed).client
    return server, client


def client_rows(partition: int, num_partitions: int, seed: int = 0, server_fraction: float = SERVER_FRACTION):
    """The rows of client ``partition`` of ``num_partitions``."""
    if not 0 <= partition < num_partitions:
        raise ValueError(f"partition-id must be in [0, {num_partitions}), got {partition}")
    X, _ = scaled()
    _, client = split(num_partitions, seed, server_fraction)
    return X[client == partition]
