import numpy as np
import pytest

from fedclust.partition import label_matrix, partition_stats, power_law


@pytest.mark.parametrize("N,c,seed", [(100, 2, 0), (100, 2, 1), (37, 3, 2), (10, 10, 0), (5, 1, 0)])
def test_exactly_c_labels_base_respected_all_samples_used(digits, N, c, seed, assert_is_partition_of):
    _, y, _ = digits
    p = power_law(y, N, labels_per_client=c, seed=seed, base=1)
    assert_is_partition_of(p, y.size)
    M = label_matrix(p, y)
    assert np.all(np.count_nonzero(M, axis=1) == c)
    assert M[M > 0].min() >= 1
    if N * c >= 10:
        assert p.client_sizes().sum() == y.size


def test_cyclic_labels_and_base_allotment():
    y = np.repeat(np.arange(10), 1000)
    p = power_law(y, 100, labels_per_client=2, seed=3, base=5)
    M = label_matrix(p, y)
    for i in range(100):
        assert np.flatnonzero(M[i]).tolist() == sorted([i % 10, (i + 1) % 10])
    assert M[M > 0].min() >= 5


def test_sizes_heavy_tailed_for_large_sigma():
    y = np.repeat(np.arange(10), 1000)

    def cv(sigma):
        s = partition_stats(power_law(y, 100, seed=0, sigma=sigma), y)
        return s["size_std"] / s["size_mean"], s["size_max"] / np.median(s["sizes"])

    cv_big, ratio_big = cv(2.0)
    cv_small, _ = cv(0.1)
    assert cv_big > 1.0 > 0.2 > cv_small
    assert ratio_big > 5  # a few very large clients: power-law-like


def test_labels_no_client_holds_are_unused():
    y = np.repeat(np.arange(10), 50)
    p = power_law(y, 3, labels_per_client=2, seed=0, base=1)  # labels 0..3 only
    assert set(np.unique(y[p.client >= 0])) == {0, 1, 2, 3}
    assert p.meta["n_unused"] == 300


def test_power_law_seed_reproducible(digits):
    _, y, _ = digits
    a = power_law(y, 40, seed=1, base=2)
    assert np.array_equal(a.client, power_law(y, 40, seed=1, base=2).client)
    assert not np.array_equal(a.client_sizes(), power_law(y, 40, seed=2, base=2).client_sizes())


def test_power_law_bad_parameters(digits):
    _, y, _ = digits
    with pytest.raises(ValueError, match="labels_per_client"):
        power_law(y, 10, labels_per_client=11, seed=0)
    with pytest.raises(ValueError, match="sigma"):
        power_law(y, 10, seed=0, sigma=0)
    with pytest.raises(ValueError, match="base"):
        power_law(y, 100, seed=0, base=50)  # 20 holders per digit x 50 > ~180 samples
    with pytest.raises(ValueError, match="base"):
        power_law(y, 10, seed=0, base=0)
    with pytest.raises(ValueError, match="n_clients"):
        power_law(y[:10], 11, seed=0)
