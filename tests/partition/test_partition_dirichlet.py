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


def _degenerate_lines(caplog):
    return [r.getMessage() for r in caplog.records if "method: label" in r.getMessage()]


@pytest.mark.parametrize("alpha", [1e-9, 1e-4])
def test_a_degenerate_client_alpha_says_what_the_clients_look_like_in_one_line(digits, alpha, caplog):
    _, y, _ = digits
    with caplog.at_level("WARNING", logger="fedclust.partition.dirichlet"):
        p = dirichlet(y, 10, alpha=alpha, seed=0)
    lines = _degenerate_lines(caplog)
    assert len(lines) == 1 and "\n" not in lines[0]
    sizes = p.client_sizes()
    labels = [np.unique(y[p.client == i]).size for i in range(10)]
    assert f"hold {sizes.min()}-{sizes.max()} samples" in lines[0]
    assert f"{min(labels)}-{max(labels)} labels each" in lines[0]
    # what the line reports is true: equal sizes, and more labels per client than at alpha = 0.05
    assert sizes.max() - sizes.min() <= 1
    at_005 = dirichlet(y, 10, alpha=0.05, seed=0)
    assert np.mean(labels) > np.mean([np.unique(y[at_005.client == i]).size for i in range(10)])


@pytest.mark.parametrize("alpha, method", [(0.5, "client"), (0.05, "client"), (10.0, "client"), (0.5, "label")])
def test_a_usable_alpha_logs_nothing(digits, alpha, method, caplog):
    _, y, _ = digits
    with caplog.at_level("WARNING", logger="fedclust.partition.dirichlet"):
        dirichlet(y, 10, alpha=alpha, seed=0, method=method)
    assert _degenerate_lines(caplog) == []
