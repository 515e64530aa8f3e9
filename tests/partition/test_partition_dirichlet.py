import numpy as np
import pytest

from fedclust.partition import dirichlet, partition_stats


@pytest.mark.parametrize("method", ["client", "label"])
def test_dirichlet_uses_every_sample_once_and_respects_min_size(digits, method, assert_is_partition_of):
    _, y, _ = digits
    p = dirichlet(y, 30, alpha=0.3, seed=4, min_size=20, method=method)
    assert_is_partition_of(p, y.size)
    assert np.all(p.client >= 0)
    assert p.client_sizes().min() >= 20
    assert p.meta["attempts"] >= 1


def test_dirichlet_client_method_near_equal_sizes(digits):
    _, y, _ = digits
    sizes = dirichlet(y, 25, alpha=0.1, seed=0).client_sizes()
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == y.size


@pytest.mark.parametrize("method", ["client", "label"])
def test_smaller_alpha_gives_more_label_skew(digits, method):
    _, y, _ = digits

    def mean_labels(alpha):
        return np.mean(
            [
                partition_stats(dirichlet(y, 20, alpha, seed=s, min_size=0, method=method), y)["labels_mean"]
                for s in range(3)
            ]
        )

    lo, mid, hi = mean_labels(0.05), mean_labels(1.0), mean_labels(100.0)
    assert lo < mid < hi
    assert lo < 3.5 and hi > 9.5  # near one-or-two labels vs (almost) all ten


def test_dirichlet_seed_reproducible(digits):
    _, y, _ = digits
    a = dirichlet(y, 10, 0.5, seed=7)
    assert np.array_equal(a.client, dirichlet(y, 10, 0.5, seed=7).client)
    assert not np.array_equal(a.client, dirichlet(y, 10, 0.5, seed=8).client)


def test_dirichlet_label_method_retries_then_fails_clearly(digits):
    _, y, _ = digits
    # alpha tiny: some client nearly always gets (almost) nothing, so min_size = n // N cannot be met
    with pytest.raises(ValueError, match="max_retries=3"):
        dirichlet(y, 30, alpha=0.01, seed=0, min_size=y.size // 30, max_retries=3, method="label")


def test_dirichlet_bad_parameters(digits):
    _, y, _ = digits
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            dirichlet(y, 10, alpha=bad, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        dirichlet(y[:5], 6, alpha=1.0, seed=0)
    with pytest.raises(ValueError, match="min_size"):
        dirichlet(y, 10, alpha=1.0, seed=0, min_size=y.size)
    with pytest.raises(ValueError, match="method"):
        dirichlet(y, 10, alpha=1.0, seed=0, method="tff")
    with pytest.raises(ValueError, match="max_retries"):
        dirichlet(y, 10, alpha=1.0, seed=0, max_retries=0)
