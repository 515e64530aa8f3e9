"""Small synthetic clustered-FL populations shared by the engine tests (imported by their siblings)."""

import numpy as np

from fedclust.clustered_fl import FederatedTensors


def two_group_clients(
    seed: int, n_clients: int, n_max: int, d: int, n_classes: int, test_per_client: int, min_size: int = 3
):
    """``n_clients`` clients of ``min_size``..``n_max`` samples in two groups whose class centres
    differ, and ``test_per_client`` test samples per client, all drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, n_max + 1, n_clients)
    client = np.repeat(np.arange(n_clients), sizes)
    group = rng.integers(0, 2, n_clients)
    centers = rng.normal(size=(2, n_classes, d)) * 2
    y = rng.integers(0, n_classes, client.size)
    X = centers[group[client], y] + rng.normal(size=(client.size, d))
    ct = np.repeat(np.arange(n_clients), test_per_client)
    yt = rng.integers(0, n_classes, ct.size)
    Xt = centers[group[ct], yt] + rng.normal(size=(ct.size, d))
    return FederatedTensors.from_arrays(X, y, client, Xt, yt, ct, group=group)
