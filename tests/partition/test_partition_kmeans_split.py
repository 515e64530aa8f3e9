import numpy as np
import pytest
from sklearn.cluster import KMeans

from fedclust.partition import kmeans_split


def test_clients_are_exactly_the_kmeans_clusters(digits, assert_is_partition_of):
    X, _, _ = digits
    X = X[:600]
    p = kmeans_split(X, 12, seed=5, n_init=2)
    assert_is_partition_of(p, X.shape[0])
    ref = KMeans(n_clusters=12, n_init=2, random_state=p.meta["random_state"]).fit_predict(X)
    assert np.array_equal(p.client, ref)
    assert p.client_sizes().min() >= 1 and p.client_sizes().sum() == X.shape[0]


def test_kmeans_split_groups_nearby_samples():
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    truth = np.repeat(np.arange(3), 40)
    X = centers[truth] + rng.normal(size=(120, 2))
    p = kmeans_split(X, 3, seed=0, n_init=3)
    # each client is one blob (a relabelling of the truth)
    assert all(np.unique(truth[p.indices(i)]).size == 1 for i in range(3))
    assert sorted(p.client_sizes().tolist()) == [40, 40, 40]


def test_kmeans_split_seed_reproducible(digits):
    X, _, _ = digits
    a = kmeans_split(X[:300], 8, seed=1, n_init=1)
    assert np.array_equal(a.client, kmeans_split(X[:300], 8, seed=1, n_init=1).client)
    assert a.meta["random_state"] != kmeans_split(X[:300], 8, seed=2, n_init=1).meta["random_state"]


def test_kmeans_split_bad_parameters(digits):
    X, _, _ = digits
    with pytest.raises(ValueError, match="n_clients"):
        kmeans_split(X[:5], 6, seed=0)
    with pytest.raises(ValueError, match="n_init"):
        kmeans_split(X[:50], 5, seed=0, n_init=0)
    with pytest.raises(ValueError, match="X must be 2-D"):
        kmeans_split(X[:, 0], 5, seed=0)
