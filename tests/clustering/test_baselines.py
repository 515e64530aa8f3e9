"""Table I baselines of DP-FedC (spec 000, 2.4; our reimplementations): FZKM, DK++, DKM."""

import math

import numpy as np
import pytest
from sklearn.cluster import kmeans_plusplus

from fedclust.clustering import dk_pp, dkm, fzkm
from fedclust.clustering._common import baseline_noise_multiplier, server_kmeans, weighted_lloyd
from fedclust.data.synthetic import gaussian_mixture
from fedclust.metrics import clustering_accuracy
from fedclust.partition.iid import iid
from fedclust.privacy.mechanisms import analytic_sigma, classical_sigma

MODULES = [fzkm, dk_pp, dkm]


@pytest.fixture(scope="module")
def mixture():
    ds = gaussian_mixture(900, 5, 4, separation=8.0, seed=11)
    return ds.X.astype(np.float64), ds.y, iid(900, 9, seed=11).client


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_clusters_a_separable_mixture(mod, mixture):
    X, y, client = mixture
    W0, _ = kmeans_plusplus(X, 4, random_state=1)
    r = mod.run(X, client, 4, rounds=8, clients_per_round=4, seed=0, init_centroids=W0, y=y)
    assert clustering_accuracy(y, r.labels) >= 0.99
    assert r.history["ACC"][-1] >= 0.99
    assert len(r.history["objective"]) == 8
    assert r.centroids.shape == (4, 5) and r.dp_events == [] and r.uploaded_reals > 0


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_recovers_from_a_bad_shared_init(mod, mixture):
    # Two initial centres in the same true cluster: the server's k-means restarts (FZKM, DKM) and
    # the k-means|| seeding (DK++) must still find the four clusters.
    X, y, client = mixture
    first = np.flatnonzero(y == 0)[:2]
    W0 = np.vstack([X[first], X[np.flatnonzero(y == 1)[0]], X[np.flatnonzero(y == 2)[0]]])
    r = mod.run(X, client, 4, rounds=10, clients_per_round=4, seed=0, init_centroids=W0)
    assert clustering_accuracy(y, r.labels) >= 0.99


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_same_seed_same_result_and_noise_changes_it(mod, mixture):
    X, y, client = mixture
    kw = dict(rounds=7, clients_per_round=3, noise_multiplier=0.5, clip=12.0)
    a = mod.run(X, client, 4, seed=3, **kw)
    b = mod.run(X, client, 4, seed=3, **kw)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    assert a.history == b.history
    plain = mod.run(X, client, 4, seed=3, rounds=7, clients_per_round=3)
    assert not np.allclose(a.centroids, plain.centroids)
    assert a.dp_events and all(e.noise_multipliers[0] == 0.5 for e in a.dp_events)
    assert sum(e.count for e in a.dp_events) == 7  # every round is a release (conservative)


def test_epsilon_calibrates_the_noise_multiplier():
    assert baseline_noise_multiplier(0.0, 0.5, 1e-4, "classical") == pytest.approx(
        math.sqrt(2 * math.log(1.25 / 1e-4)) / 0.5)
    assert baseline_noise_multiplier(0.0, 2.0, 1e-5, "analytic") == pytest.approx(analytic_sigma(2.0, 1e-5))
    assert baseline_noise_multiplier(0.7, None, 1e-4, "classical") == 0.7
    with pytest.raises(ValueError, match="either"):
        baseline_noise_multiplier(0.7, 1.0, 1e-4, "classical")
    with pytest.raises(ValueError, match="mechanism"):
        baseline_noise_multiplier(0.0, 1.0, 1e-4, "laplace")


def test_fzkm_noise_std_is_z_times_the_sensitivity(mixture):
    X, y, client = mixture
    r = fzkm.run(X, client, 4, rounds=2, clients_per_round=3, seed=0, epsilon=0.5, delta=1e-4, clip=3.0)
    z = classical_sigma(0.5, 1e-4)
    assert r.info["noise_multiplier"] == pytest.approx(z)
    assert r.info["noise_std"] == pytest.approx(z * math.sqrt(3.0**2 + 1))  # add/remove (S_i, M_i)
    assert r.info["dp_exact"] is True


def test_fcm_memberships_by_hand():
    d2 = np.array([[1.0, 4.0, 4.0], [0.0, 2.0, 5.0]])
    u = fzkm.fcm_memberships(d2, 2.0)  # f = 2: u_l proportional to 1/d2_l
    np.testing.assert_allclose(u[0], np.array([1, 0.25, 0.25]) / 1.5)
    np.testing.assert_allclose(u[1], [1.0, 0.0, 0.0])  # a point on a centre belongs to it
    np.testing.assert_allclose(fzkm.fcm_memberships(d2 + 1, 3.0).sum(1), 1.0)


def test_dk_pp_seeding_oversamples_candidates(mixture):
    X, y, client = mixture
    r = dk_pp.run(X, client, 4, rounds=8, clients_per_round=3, seed=0, seeding_rounds=3, oversampling=8)
    assert r.info["n_candidates"] > 4 + 3  # k initial + new candidates in each seeding round
    with pytest.raises(ValueError, match="rounds"):
        dk_pp.run(X, client, 4, rounds=3, seeding_rounds=3)


def test_dkm_local_kmeans_is_a_lloyd_fixed_point():
    rng = np.random.default_rng(0)
    Xp = rng.random((3, 20, 2))
    mask = np.ones((3, 20), dtype=bool)
    mask[2, 12:] = False
    B, dmin, sizes = dkm.local_kmeans(Xp * mask[..., None], mask, 3, 60, rng)
    np.testing.assert_array_equal(sizes.sum(1), [20, 20, 12])
    assert (dmin[2, 12:] == 0).all()
    # Lloyd fixed point: every local centre is the mean of its points
    d2 = ((Xp[0][:, None, :] - B[0][None]) ** 2).sum(-1)
    lab = d2.argmin(1)
    for j in range(3):
        if (lab == j).any():
            np.testing.assert_allclose(B[0, j], Xp[0][lab == j].mean(0), atol=1e-12)


def test_weighted_lloyd_and_server_kmeans():
    P = np.array([[0.0], [1.0], [10.0], [11.0]])
    w = np.array([1.0, 3.0, 1.0, 1.0])
    C = weighted_lloyd(P, w, np.array([[0.0], [10.0]]))
    np.testing.assert_allclose(np.sort(C.ravel()), [0.75, 10.5])
    bad = np.array([[10.0], [11.0]])  # both centres in one group: warm start is stuck, restarts fix it
    C = server_kmeans(P, w, bad, np.random.default_rng(0), n_init=3)
    np.testing.assert_allclose(np.sort(C.ravel()), [0.75, 10.5])


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_bad_parameters_raise(mod, mixture):
    X, y, client = mixture
    with pytest.raises(ValueError, match="clients_per_round"):
        mod.run(X, client, 4, rounds=6, clients_per_round=20)
    with pytest.raises(ValueError, match="noise_multiplier"):
        mod.run(X, client, 4, rounds=6, clients_per_round=2, noise_multiplier=-1.0)
    with pytest.raises(ValueError, match="init_centroids"):
        mod.run(X, client, 4, rounds=6, clients_per_round=2, init_centroids=np.zeros((3, 5)))
