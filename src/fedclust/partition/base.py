"""The result of every partitioner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Partition:
    """Which client holds each sample.

    * ``client``: (n_samples,) int64, the client of every sample; -1 marks a sample that no client
      holds (for example a held-out test sample or one dropped by a scheme).
    * ``n_clients``: number of clients (ids 0..n_clients-1; a client may be empty only if the scheme says so).
    * ``group``: (n_clients,) int64 true group of every client where groups exist (rotation), else None.
    * ``test_client``: (n_samples,) int64, the client whose *held-out test set* holds each sample, -1
      elsewhere; None for schemes without a test split.
    * ``meta``: scheme name and parameters, and scheme-specific facts (rotation angles per group...).
    """

    client: np.ndarray
    n_clients: int
    group: np.ndarray | None = None
    test_client: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.client = np.asarray(self.client).astype(np.int64, copy=False)
        if self.group is not None:
            self.group = np.asarray(self.group).astype(np.int64, copy=False)
            if self.group.shape != (self.n_clients,):
                raise ValueError(f"group must have one entry per client ({self.n_clients}), got {self.group.shape}")
        if self.test_client is not None:
            self.test_client = np.asarray(self.test_client).astype(np.int64, copy=False)
            if self.test_client.shape != self.client.shape:
                raise ValueError("test_client must have one entry per sample, like client")
            if np.any((self.client >= 0) & (self.test_client >= 0)):
                raise ValueError("a sample cannot be both a training and a test sample")

    def client_sizes(self) -> np.ndarray:
        """(n_clients,) number of training samples per client."""
        c = self.client[self.client >= 0]
        return np.bincount(c, minlength=self.n_clients)

    def indices(self, i: int) -> np.ndarray:
        """Training sample indices of client ``i``."""
        return np.flatnonzero(self.client == i)
