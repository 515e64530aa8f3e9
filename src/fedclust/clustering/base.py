"""What every federated data clustering method returns.

Each method module exposes ``run(X, client, k, *, seed, ..., y=None) -> ClusteringResult``:

* ``X``: (n_samples, n_features) float array, rows are samples (the papers write samples as
  columns; modules transpose internally where that reads better).
* ``client``: (n_samples,) int array, the client that holds each sample (0..n_clients-1).
* ``k``: number of clusters.
* ``y``: optional true labels, used *only* to log per-round ACC/NMI in ``history``.

Methods never compute their own epsilon: they return the DP releases they actually made
(``dp_events``) and the privacy-report stage accounts them (DESIGN.md, principle 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class ClusteringResult:
    labels: np.ndarray  # (n_samples,) predicted cluster of every sample
    centroids: np.ndarray | None = None  # (k, n_features) where the method has centroids
    history: dict[str, list[float]] = field(default_factory=dict)  # per-round metric histories
    dp_events: list = field(default_factory=list)  # fedclust.privacy.events.GaussianRelease items
    uploaded_reals: int = 0  # total number of reals sent by clients to the server
    info: dict[str, Any] = field(default_factory=dict)  # method-specific scalars worth logging

    def final_metrics(self) -> dict[str, float]:
        """The last value of every history, for convenience."""
        return {k: float(v[-1]) for k, v in self.history.items() if len(v)}


def check_inputs(X, client, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate the common inputs; returns ``(X float64, client int64, n_clients)``.

    Raises ``ValueError`` naming the offending parameter.
    """
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or infinite values")
    client = np.asarray(client)
    if client.shape != (X.shape[0],):
        raise ValueError(f"client must have one entry per sample ({X.shape[0]}), got shape {client.shape}")
    if client.size and client.min() < 0:
        raise ValueError("client contains negative ids; drop unused samples before clustering")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k (number of clusters) must be a positive int, got {k!r}")
    if k > X.shape[0]:
        raise ValueError(f"k={k} is larger than the number of samples ({X.shape[0]})")
    n_clients = int(client.max()) + 1 if client.size else 0
    return X.astype(np.float64, copy=False), client.astype(np.int64, copy=False), n_clients
