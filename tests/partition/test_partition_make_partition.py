import numpy as np
import pytest

from fedclust.partition import (
    SCHEMES,
    RotatedData,
    dirichlet,
    iid,
    kmeans_split,
    make_partition,
    power_law,
    rotation,
    shards,
)


def test_dispatch_matches_direct_calls(digits):
    X, y, img = digits
    X, y, img = X[:400], y[:400], img[:400]
    same = lambda a, b: np.array_equal(a.client, b.client)  # noqa: E731
    assert same(make_partition("iid", y=y, n_clients=7, seed=1), iid(400, 7, 1))
    assert same(make_partition("iid", X=X, n_clients=7, seed=1), iid(400, 7, 1))
    assert same(make_partition("dirichlet", y=y, n_clients=7, seed=1, alpha=0.3), dirichlet(y, 7, 0.3, seed=1))
    assert same(
        make_partition("shards", y=y, n_clients=10, seed=1, labels_per_client=3),
        shards(y, 10, labels_per_client=3, seed=1),
    )
    assert same(make_partition("power_law", y=y, n_clients=10, seed=1, base=2), power_law(y, 10, seed=1, base=2))
    assert same(make_partition("kmeans", X=X, n_clients=5, seed=1, n_init=1), kmeans_split(X, 5, seed=1, n_init=1))
    rd = make_partition("rotation", images=img, y=y, n_clients=8, seed=1, n_groups=2)
    assert isinstance(rd, RotatedData)
    assert np.array_equal(rd.source_train, rotation(img, y, n_groups=2, n_clients=8, seed=1).source_train)


def test_unknown_scheme_lists_valid_ones():
    with pytest.raises(ValueError, match="iid, dirichlet, shards, power_law, kmeans, rotation"):
        make_partition("label_swap", y=np.zeros(10, int), n_clients=2, seed=0)
    assert SCHEMES == ("iid", "dirichlet", "shards", "power_law", "kmeans", "rotation")


def test_missing_input_is_named():
    with pytest.raises(ValueError, match="needs X"):
        make_partition("kmeans", y=np.zeros(10, int), n_clients=2, seed=0)
    with pytest.raises(ValueError, match="needs images"):
        make_partition("rotation", y=np.zeros(10, int), n_clients=2, seed=0)
    with pytest.raises(ValueError, match="needs y"):
        make_partition("shards", X=np.zeros((10, 2)), n_clients=2, seed=0)
