"""Argument checks shared by the partitioners (each error names the parameter and the allowed range)."""

from __future__ import annotations

import numpy as np

from fedclust.options import check_int


def check_labels(y, name: str = "y") -> np.ndarray:
    """``y`` as a 1-D int64 array of non-negative labels."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label per sample), got shape {y.shape}")
    if y.size == 0:
        raise ValueError(f"{name} must hold at least one sample")
    if not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise ValueError(f"{name} must hold integer class labels")
    y = y.astype(np.int64)
    if y.min() < 0:
        raise ValueError(f"{name} must hold labels >= 0, got min {y.min()}")
    return y


def check_n_clients(n_clients, n_samples: int) -> int:
    """1 <= n_clients <= n_samples."""
    return check_int("n_clients", n_clients, 1, n_samples)


def check_label_scheme(y, n_clients, labels_per_client):
    """The common checks of the label-skew schemes (shards, power_law): ``y`` (n,) labels, ``n_clients``
    in 1..n, ``labels_per_client`` in 1..L. Returns ``(y, n, n_clients, labels, L, c)``."""
    y = check_labels(y)
    n = y.size
    n_clients = check_n_clients(n_clients, n)
    labels = np.unique(y)
    L = labels.size
    c = check_int("labels_per_client", labels_per_client, 1, L)
    return y, n, n_clients, labels, L, c
