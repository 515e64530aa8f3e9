import numpy as np
import pytest

from fedclust.partition import label_matrix, shards


def synthetic_labels(L=10, base=1000, step=7, seed=0):
    """Shuffled labels with unequal class counts base + step * k."""
    y = np.repeat(np.arange(L), base + step * np.arange(L))
    return np.random.default_rng(seed).permutation(y)


@pytest.mark.parametrize(
    "N,c,seed",
    [(100, 2, s) for s in range(15)] + [(30, 3, 0), (33, 3, 1), (17, 4, 2), (10, 10, 0), (7, 1, 3), (1, 2, 0)],
)
def test_every_client_holds_exactly_c_labels_and_all_samples_used(N, c, seed, assert_is_partition_of):
    y = synthetic_labels(base=200)
    p = shards(y, N, labels_per_client=c, seed=seed)
    assert_is_partition_of(p, y.size)
    M = label_matrix(p, y)
    assert np.all(np.count_nonzero(M, axis=1) == c)
    if N * c >= 10:  # all shards used up; otherwise only N * c labels get a shard
        assert p.client_sizes().sum() == y.size and np.all(p.client >= 0)
    else:
        assert np.unique(y[p.client >= 0]).size == N * c
    # meta records the same label choice as the data
    assert [sorted(np.flatnonzero(r).tolist()) for r in M] == p.meta["client_labels"]


def test_shards_are_contiguous_near_equal_pieces_of_each_label(digits):
    _, y, _ = digits
    p = shards(y, 100, labels_per_client=2, seed=6)
    assert p.meta["shards_per_label"] == [20] * 10
    for k in range(10):
        idx = np.flatnonzero(y == k)  # the label's samples in data order
        owners = p.client[idx]
        # contiguous: the owner changes exactly 19 times along the label (20 shards, 20 distinct owners)
        assert np.count_nonzero(np.diff(owners)) == 19
        run_sizes = np.bincount(owners)[np.unique(owners)]
        assert np.unique(owners).size == 20 and run_sizes.max() - run_sizes.min() <= 1


def test_uneven_shard_total_spread_over_labels():
    y = synthetic_labels(base=100)
    p = shards(y, 15, labels_per_client=2, seed=0)  # 30 shards over 10 labels
    assert sorted(p.meta["shards_per_label"]) == [3] * 10
    p = shards(y, 13, labels_per_client=3, seed=0)  # 39 shards: nine labels with 4, one with 3
    assert sorted(p.meta["shards_per_label"]) == [3] + [4] * 9
    assert np.all(np.count_nonzero(label_matrix(p, y), axis=1) == 3)


def test_equalize_gives_equal_client_sizes():
    y = synthetic_labels(base=1000, step=13)
    p = shards(y, 100, labels_per_client=2, seed=2, equalize=True)  # 1000 per label, shards of 50
    assert np.all(p.client_sizes() == 100)
    assert np.all(np.bincount(y[p.client >= 0]) == 1000)


def test_cyclic_pairing_is_deterministic():
    y = synthetic_labels(base=100)
    p = shards(y, 20, labels_per_client=2, seed=0, pairing="cyclic")
    assert p.meta["client_labels"] == [sorted([i % 10, (i + 1) % 10]) for i in range(20)]


def test_surplus_shards_are_dropped_and_labels_still_exact():
    y = synthetic_labels(base=300)
    p = shards(y, 100, labels_per_client=2, seed=0, shards_per_label=30)  # 300 shards, 200 used
    assert p.meta["dropped_shards"] == 100
    M = label_matrix(p, y)
    assert np.all(np.count_nonzero(M, axis=1) == 2)
    assert 0 < np.count_nonzero(p.client < 0) < y.size


def test_shards_seed_reproducible(digits):
    _, y, _ = digits
    a = shards(y, 50, seed=1)
    assert np.array_equal(a.client, shards(y, 50, seed=1).client)
    assert not np.array_equal(a.client, shards(y, 50, seed=2).client)


def test_shards_bad_parameters(digits):
    _, y, _ = digits
    with pytest.raises(ValueError, match="labels_per_client"):
        shards(y, 10, labels_per_client=11, seed=0)
    with pytest.raises(ValueError, match="labels_per_client"):
        shards(y, 10, labels_per_client=0, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        shards(y[:20], 21, seed=0)
    with pytest.raises(ValueError, match="shards_per_label"):
        shards(y, 100, labels_per_client=2, seed=0, shards_per_label=19)
    with pytest.raises(ValueError, match="label 3 has 2 samples"):
        shards(np.array([0] * 50 + [1] * 50 + [2] * 50 + [3] * 2), 4, labels_per_client=4, seed=0)
    with pytest.raises(ValueError, match="pairing"):
        shards(y, 10, seed=0, pairing="greedy")
