import numpy as np
import pytest

from fedclust.partition import iid


@pytest.mark.parametrize("n,N", [(1797, 100), (10, 10), (5314, 100), (7, 3)])
def test_iid_uses_every_sample_once_in_near_equal_parts(n, N, assert_is_partition_of):
    p = iid(n, N, seed=3)
    assert_is_partition_of(p, n)
    sizes = p.client_sizes()
    assert sizes.sum() == n and np.all(p.client >= 0)
    assert sizes.max() - sizes.min() <= 1
    if (n, N) == (5314, 100):  # DP-FedC TCGA: 14 clients of 54 and 86 of 53
        assert np.bincount(sizes).tolist()[53:] == [86, 14]


def test_iid_seed_reproducible_and_random():
    a, b, c = iid(500, 10, seed=1), iid(500, 10, seed=1), iid(500, 10, seed=2)
    assert np.array_equal(a.client, b.client)
    assert not np.array_equal(a.client, c.client)
    # random, not contiguous blocks: client 0 does not hold the first 50 samples
    assert not np.array_equal(np.sort(a.indices(0)), np.arange(50))


def test_iid_bad_parameters():
    with pytest.raises(ValueError, match="n_clients"):
        iid(5, 6, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        iid(5, 0, seed=0)
    with pytest.raises(ValueError, match="n_samples"):
        iid(0, 1, seed=0)
