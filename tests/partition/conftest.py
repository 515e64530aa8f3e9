"""Shared small data for the partition tests."""

import numpy as np
import pytest
from sklearn.datasets import load_digits


@pytest.fixture(scope="session")
def digits():
    d = load_digits()
    return d.data.astype(np.float32), d.target.astype(np.int64), d.images.astype(np.float32)


def _assert_is_partition_of(p, n):
    """Every sample held by exactly one client (or -1), ids in range: a valid disjoint assignment."""
    assert p.client.shape == (n,)
    assert p.client.min() >= -1 and p.client.max() < p.n_clients
    held = np.concatenate([p.indices(i) for i in range(p.n_clients)])
    assert np.unique(held).size == held.size  # no sample used twice
    assert held.size == np.count_nonzero(p.client >= 0)


@pytest.fixture
def assert_is_partition_of():
    return _assert_is_partition_of
