"""Random rebalancing (RR-Cluster, spec 002 section 2.3): invariants and uniformity of the draws."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare, norm

from fedclust.clustered_fl.rebalance import (
    check_threshold,
    identifier_keep_probability,
    min_expected_cluster_size,
    random_rebalance,
)
from fedclust.clustered_fl.rr_cluster import privatize_identifiers


def _random_groups(rng, m, k, skew):
    p = rng.dirichlet(np.full(k, skew))
    return rng.choice(k, size=m, p=p)


def test_invariants_over_many_random_assignments():
    rng = np.random.default_rng(0)
    for trial in range(400):
        k = int(rng.integers(2, 7))
        m = int(rng.integers(k, 120))
        B = int(rng.integers(0, m // k + 1))
        g0 = _random_groups(rng, m, k, skew=0.3)
        before = g0.copy()
        res = random_rebalance(g0, k, B, np.random.default_rng(trial))
        np.testing.assert_array_equal(g0, before)  # input untouched
        sizes0 = np.bincount(g0, minlength=k)
        sizes = np.bincount(res.groups, minlength=k)
        # a partition of the same m updates: one cluster per update, sizes add up
        assert res.groups.shape == (m,) and sizes.sum() == m
        np.testing.assert_array_equal(sizes, res.sizes_after)
        np.testing.assert_array_equal(sizes0, res.sizes_before)
        # every cluster >= B; small clusters filled to exactly B; large ones never go below B
        assert sizes.min() >= B
        small = sizes0 < B
        np.testing.assert_array_equal(sizes[small], B)
        assert np.all(sizes[~small] >= B) and np.all(sizes[~small] <= sizes0[~small])
        # moved (not copied): exactly one move per missing update, each update moved at most once
        deficit = int(np.maximum(B - sizes0, 0).sum())
        assert res.n_moved == deficit
        np.testing.assert_array_equal(res.groups[~res.moved], g0[~res.moved])
        # moved updates come from large clusters and land in small ones
        assert np.all(~small[g0[res.moved]]) and np.all(small[res.groups[res.moved]])
        assert np.all(res.groups[res.moved] != g0[res.moved])


def test_b_zero_and_no_small_cluster_draw_nothing():
    g = np.array([0, 1, 2, 0, 1, 2, 0])
    for B in (0, 2):
        rng = np.random.default_rng(5)
        state = rng.bit_generator.state
        res = random_rebalance(g, 3, B, rng)
        assert res.n_moved == 0
        np.testing.assert_array_equal(res.groups, g)
        assert rng.bit_generator.state == state


def test_donor_at_exactly_b_never_donates():
    # sizes (4, 8, 0) with B = 4: cluster 0 has no surplus, so all 4 moves come from cluster 1
    g = np.array([0] * 4 + [1] * 8)
    for seed in range(50):
        res = random_rebalance(g, 3, 4, np.random.default_rng(seed))
        np.testing.assert_array_equal(res.sizes_after, [4, 4, 4])
        assert not res.moved[:4].any() and res.moved[4:].sum() == 4


def test_single_draw_is_uniform_over_pooled_updates():
    # sizes (10, 6, 2), B = 3: one move, uniform over the 16 updates of clusters 0 and 1
    # (uniform over UPDATES: a cluster-first draw would give cluster 1's updates 1/12 each, not 1/16)
    g = np.array([0] * 10 + [1] * 6 + [2] * 2)
    rng = np.random.default_rng(1)
    n = 16000
    counts = np.zeros(g.size, dtype=np.int64)
    for _ in range(n):
        counts += random_rebalance(g, 3, 3, rng).moved
    assert counts[16:].sum() == 0
    stat, p = chisquare(counts[:16])
    assert p > 1e-3, (counts, p)
    # a cluster-first draw would move cluster 1's updates 50% of the time; uniform gives 6/16
    assert abs(counts[10:16].sum() / n - 6 / 16) < 0.02


def test_multi_move_marginals_are_uniform():
    # sizes (12, 8, 0, 0), B = 2: 4 moves; by symmetry every pooled update moves with prob 4/20
    g = np.array([0] * 12 + [1] * 8)
    rng = np.random.default_rng(2)
    n = 6000
    counts = np.zeros(g.size, dtype=np.int64)
    dst = np.zeros(4, dtype=np.int64)
    for _ in range(n):
        res = random_rebalance(g, 4, 2, rng)
        counts += res.moved
        dst += np.bincount(res.groups[res.moved], minlength=4)
    assert counts.sum() == 4 * n
    stat, p = chisquare(counts)
    assert p > 1e-3, (counts, p)
    np.testing.assert_array_equal(dst, [0, 0, 2 * n, 2 * n])


def test_threshold_validation_names_b():
    with pytest.raises(ValueError, match=r"B \(rebalancing threshold\) must satisfy B <= m/k"):
        random_rebalance(np.zeros(10, dtype=int), 4, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="B"):
        check_threshold(-1, 10, 2)
    with pytest.raises(ValueError, match="B"):
        check_threshold(1.5, 10, 2)
    assert check_threshold(2, 10, 4) == 2
    with pytest.raises(ValueError, match="cluster ids"):
        random_rebalance(np.array([0, 3]), 3, 0, np.random.default_rng(0))


def test_identifier_keep_probability_closed_form_and_monte_carlo():
    # k = 2: keep iff sigma (Z_1 - Z_0) < 1, i.e. Phi(1 / (sigma sqrt 2))
    for s in (0.3, 1.0, 2.5):
        assert identifier_keep_probability(s, 2) == pytest.approx(norm.cdf(1 / (s * np.sqrt(2))), abs=1e-6)
    assert identifier_keep_probability(0.0, 4) == 1.0
    assert identifier_keep_probability(1e4, 4) == pytest.approx(0.25, abs=1e-3)
    # k = 4 against the privatized identifiers actually used by RR-Cluster (C_s cancels in the argmax)
    import torch

    rng = np.random.default_rng(1)
    chosen = torch.as_tensor(rng.integers(0, 4, 100_000))
    for s in (0.5, 1.2):  # replace-one calibration: per-coordinate std sqrt(2) C_s sigma_s
        noisy, _ = privatize_identifiers(chosen, 4, s, 0.1, rng)
        mc = float((noisy == chosen).float().mean())
        assert identifier_keep_probability(np.sqrt(2) * s, 4) == pytest.approx(mc, abs=0.006), (s, mc)
    with pytest.raises(ValueError, match="sigma_s"):
        identifier_keep_probability(-1.0, 4)
    with pytest.raises(ValueError, match="k"):
        identifier_keep_probability(1.0, 0)


def test_identifier_noise_fills_every_cluster_so_rr_is_inert():
    """Worst case for RR: all m clients pick cluster 0. With sigma_s = 2 (k = 4, m = 100) the noise alone
    puts about min_expected_cluster_size = 20 updates into each other cluster, so B = 8 almost never
    moves anything, while B = 25 (= m/k) moves in every round."""
    import torch

    m, k, s = 100, 4, 2.0
    floor = min_expected_cluster_size(m, k, s)
    assert floor == pytest.approx(m * (1 - identifier_keep_probability(s, k)) / 3)
    assert 19 < floor < 21
    rng = np.random.default_rng(2)
    chosen = torch.zeros(m, dtype=torch.long)
    sizes, moved8, moved25 = [], [], []
    for _ in range(300):
        noisy, _ = privatize_identifiers(chosen, k, s / np.sqrt(2), 0.1, rng)  # per-coordinate std s * C_s
        g = noisy.numpy()
        sizes.append(np.bincount(g, minlength=k)[1:])
        moved8.append(random_rebalance(g, k, 8, rng).n_moved)
        moved25.append(random_rebalance(g, k, 25, rng).n_moved)
    assert np.mean(sizes) == pytest.approx(floor, abs=0.6)
    assert np.mean(np.asarray(moved8) > 0) < 0.02
    assert np.mean(np.asarray(moved25) > 0) > 0.95
