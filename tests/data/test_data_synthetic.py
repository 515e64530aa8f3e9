"""Synthetic generators: each test checks the property that defines the generator."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.data import synthetic as syn


def _pairwise(c):
    d = np.linalg.norm(c[:, None, :] - c[None, :, :], axis=-1)
    return d[np.triu_indices(len(c), 1)]


# ------------------------------------------------------------------ Gaussian mixture
def test_gaussian_mixture_equidistant_centres_and_spread():
    ds = syn.gaussian_mixture(4000, n_features=5, k=4, separation=3.0, seed=3, cluster_std=2.0)
    c = ds.meta["centers"]
    np.testing.assert_allclose(_pairwise(c), 3.0 * 2.0, rtol=1e-10)  # separation in units of std
    assert np.bincount(ds.y).tolist() == [1000] * 4
    resid = ds.X - c[ds.y]
    assert abs(resid.std() - 2.0) < 0.05  # cluster std
    np.testing.assert_allclose(resid.mean(axis=0), 0.0, atol=0.1)


def test_gaussian_mixture_many_clusters_minimum_distance_and_weights():
    ds = syn.gaussian_mixture(1000, n_features=2, k=7, separation=5.0, seed=0, weights=[3, 1, 1, 1, 1, 1, 2])
    d = _pairwise(ds.meta["centers"])
    assert d.min() == pytest.approx(5.0) and d.max() < 5 * 5.0  # fairly even spread
    assert np.bincount(ds.y).tolist() == [300, 100, 100, 100, 100, 100, 200]


def test_gaussian_mixture_separation_controls_bayes_error():
    # Two clusters: nearest-centre classification error is Phi(-sep/2).
    for sep, expected in [(2.0, 0.1587), (6.0, 0.00135)]:
        ds = syn.gaussian_mixture(20000, n_features=3, k=2, separation=sep, seed=1)
        c = ds.meta["centers"]
        pred = np.argmin(((ds.X[:, None, :] - c[None]) ** 2).sum(-1), axis=1)
        assert abs(np.mean(pred != ds.y) - expected) < 0.01


def test_gaussian_mixture_seeded_and_validated():
    a = syn.gaussian_mixture(50, 3, 2, 4.0, seed=5)
    b = syn.gaussian_mixture(50, 3, 2, 4.0, seed=5)
    c = syn.gaussian_mixture(50, 3, 2, 4.0, seed=6)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y) and not np.array_equal(a.X, c.X)
    with pytest.raises(ValueError, match="separation"):
        syn.gaussian_mixture(50, 3, 2, -1.0)
    with pytest.raises(ValueError, match="k must be <= n_samples"):
        syn.gaussian_mixture(5, 3, 6, 1.0)
    with pytest.raises(ValueError, match="weights"):
        syn.gaussian_mixture(50, 3, 2, 1.0, weights=[1, -1])


# ------------------------------------------------------------------ linear model X = W H + E
@pytest.mark.parametrize("snr_db", [-3.0, 0.0, 10.0])
def test_linear_model_measured_snr_is_exact(snr_db):
    ds = syn.linear_model(n_samples=400, n_features=60, k=5, snr_db=snr_db, seed=2)
    W = ds.meta["W"]
    assert W.shape == (60, 5) and W.min() >= 0 and W.max() <= 1  # W ~ U[0,1], M x K
    H = np.eye(5)[:, ds.y]  # one-hot columns from the labels
    WH = W @ H  # (M, N)
    E = ds.X.T.astype(np.float64) - WH  # Dataset rows are samples: X_rows = (WH + E)^T
    measured = 10 * np.log10((WH**2).sum() / (E**2).sum())
    assert measured == pytest.approx(snr_db, abs=1e-3)  # float32 storage only
    assert ds.meta["snr_db_realized"] == pytest.approx(snr_db, abs=1e-9)


def test_linear_model_snr_in_expectation_and_noise_is_gaussian():
    ds = syn.linear_model(n_samples=500, n_features=100, k=4, snr_db=-3.0, seed=0, exact_snr=False)
    E = ds.X - ds.meta["W"].T[ds.y]
    measured = 10 * np.log10(ds.meta["signal_energy"] / (E.astype(np.float64) ** 2).sum())
    assert abs(measured + 3.0) < 0.1 and measured != pytest.approx(-3.0, abs=1e-6)
    assert abs(E.std() / ds.meta["noise_std"] - 1) < 0.02
    assert E.min() < 0  # not clipped


def test_linear_model_labels_match_h():
    # At high SNR each sample is closest to the column of W named by its label.
    ds = syn.linear_model(n_samples=300, n_features=50, k=6, snr_db=30.0, seed=4)
    W = ds.meta["W"]
    nearest = np.argmin(((ds.X[:, None, :] - W.T[None]) ** 2).sum(-1), axis=1)
    assert np.array_equal(nearest, ds.y)
    bal = syn.linear_model(n_samples=60, n_features=10, k=6, snr_db=0, seed=4, balanced=True)
    assert np.bincount(bal.y).tolist() == [10] * 6


def test_linear_model_seeded():
    a = syn.linear_model(50, 8, 3, -3, seed=1)
    b = syn.linear_model(50, 8, 3, -3, seed=1)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.meta["W"], b.meta["W"])
    with pytest.raises(ValueError, match="snr_db"):
        syn.linear_model(50, 8, 3, float("nan"))


# ------------------------------------------------------------------ circles
def test_concentric_circles_radii_counts_and_noise():
    ds = syn.concentric_circles(n_samples=301, radii=(1.0, 2.5, 5.0), noise=0.0, seed=0)
    assert np.bincount(ds.y).tolist() == [101, 100, 100]
    r = np.linalg.norm(ds.X, axis=1)
    np.testing.assert_allclose(r, np.array([1.0, 2.5, 5.0])[ds.y], rtol=1e-6)
    noisy = syn.concentric_circles(n_samples=4000, noise=0.2, seed=1)
    clean_pos = np.array([2.0, 4.0])[noisy.y]
    r = np.linalg.norm(noisy.X, axis=1)
    assert abs(np.std(r - clean_pos) - 0.2) < 0.02  # radial noise std = per-coordinate std


def test_concentric_circles_grid_angles():
    ds = syn.concentric_circles(n_samples=8, radii=(2.0,), noise=0.0, angles="grid")
    ang = np.mod(np.arctan2(ds.X[:, 1], ds.X[:, 0]), 2 * np.pi)
    np.testing.assert_allclose(np.sort(ang), np.arange(8) * np.pi / 4, atol=1e-6)
    with pytest.raises(ValueError, match="radii"):
        syn.concentric_circles(10, radii=(2.0, -1.0))


# ------------------------------------------------------------------ mixed linear regression
def test_mixed_linear_regression_noiseless_targets_and_group_sizes():
    params = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])  # (k, d+1): slopes then intercept
    rd = syn.mixed_linear_regression(101, n_features=2, k=2, noise_std=0.0, seed=0, true_params=params, weights=[2, 1])
    assert rd.X.shape == (101, 2) and rd.target.dtype == np.float32
    assert np.bincount(rd.group).tolist() == [67, 34]
    expected = (rd.X.astype(float) * params[rd.group, :2]).sum(1) + params[rd.group, 2]
    np.testing.assert_allclose(rd.target, expected, rtol=1e-5, atol=1e-5)


def test_mixed_linear_regression_recovers_params_per_group():
    rd = syn.mixed_linear_regression(3000, n_features=3, k=3, noise_std=0.5, seed=7)
    assert rd.true_params.shape == (3, 4)
    for g in range(3):
        m = rd.group == g
        A = np.c_[rd.X[m], np.ones(m.sum())]
        coef, *_ = np.linalg.lstsq(A, rd.target[m], rcond=None)
        np.testing.assert_allclose(coef, rd.true_params[g], atol=0.06)
        resid = rd.target[m] - A @ coef
        assert abs(resid.std() - 0.5) < 0.05
    no_b = syn.mixed_linear_regression(10, 2, 2, seed=0, intercept=False)
    assert np.all(no_b.true_params[:, -1] == 0)


@pytest.mark.parametrize("scenario, counts", [("balanced", [25, 25, 25, 25]), ("imbalanced", [50, 25, 13, 12])])
@pytest.mark.parametrize("difficulty, sigma", [("easy", 0.1), ("hard", 1.0)])
def test_mixed_regression_1d_scenarios(scenario, counts, difficulty, sigma):
    rd = syn.mixed_regression_1d(scenario, difficulty, seed=0)
    assert rd.X.shape == (5000, 1) and rd.X.min() >= -3 and rd.X.max() <= 3
    assert np.bincount(rd.client_group).tolist() == counts  # clients per line, 4:2:1:1 or 1:1:1:1
    assert np.array_equal(rd.client, np.repeat(np.arange(100), 50))
    assert np.array_equal(rd.group, rd.client_group[rd.client])  # one group per client
    assert np.array_equal(rd.true_params, syn.RR_CLUSTER_LINES)
    kb = rd.true_params[rd.group]
    resid = rd.target - (kb[:, 0] * rd.X[:, 0] + kb[:, 1])
    assert abs(resid.std() - sigma) < 0.05 * sigma


def test_mixed_regression_as_dataset_and_validation():
    rd = syn.mixed_regression_1d(n_clients=8, n_per_client=3, seed=1)
    ds = rd.as_dataset()
    assert np.array_equal(ds.y, rd.group) and np.array_equal(ds.meta["target"], rd.target)
    with pytest.raises(ValueError, match="scenario"):
        syn.mixed_regression_1d("skewed")
    with pytest.raises(ValueError, match="difficulty"):
        syn.mixed_regression_1d("balanced", "medium")
    with pytest.raises(ValueError, match="true_params"):
        syn.mixed_linear_regression(10, 2, 2, true_params=np.zeros((3, 3)))
