import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from fedclust.clustering import fkm
from fedclust.metrics import clustering_accuracy


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=600, centers=4, cluster_std=0.6, random_state=1)
    client = np.random.default_rng(0).permutation(600) % 6
    return X, y, client


def lloyd_reference(X, C, rounds):
    """Centralized Lloyd from the same start: FKM with all clients and no noise must equal it."""
    C = C.copy()
    for _ in range(rounds):
        lab = ((X[:, None, :] - C[None]) ** 2).sum(-1).argmin(1)
        for l in range(C.shape[0]):
            if (lab == l).any():
                C[l] = X[lab == l].mean(0)
    return C


def test_full_participation_without_noise_equals_centralized_lloyd(blobs):
    X, y, client = blobs
    C0 = X[[0, 1, 2, 3]].copy()
    res = fkm.run(X, client, 4, rounds=7, init_centroids=C0, seed=0)
    np.testing.assert_allclose(res.centroids, lloyd_reference(X, C0, 7), atol=1e-10)


def test_objective_never_increases_without_noise(blobs):
    X, y, client = blobs
    res = fkm.run(X, client, 4, rounds=10, seed=3, y=y)
    obj = np.array(res.history["objective"])
    assert np.all(np.diff(obj) <= 1e-12)
    assert obj[-1] < obj[0]


def test_recovers_separated_blobs_like_sklearn(blobs):
    X, y, client = blobs
    # one starting point per blob: Lloyd's fixed point is the true partition
    C0 = np.stack([X[np.flatnonzero(y == c)[0]] for c in range(4)])
    res = fkm.run(X, client, 4, rounds=10, seed=0, init_centroids=C0, y=y)
    ref = clustering_accuracy(y, KMeans(4, n_init=10, random_state=0).fit_predict(X))
    assert res.history["ACC"][-1] >= ref - 0.02
    assert res.history["ACC"][-1] == 1.0


def test_partial_participation_uploads_and_same_seed(blobs):
    X, y, client = blobs
    a = fkm.run(X, client, 4, rounds=5, clients_per_round=2, seed=11)
    b = fkm.run(X, client, 4, rounds=5, clients_per_round=2, seed=11)
    assert np.array_equal(a.labels, b.labels)
    assert a.uploaded_reals == 5 * 2 * 4 * (X.shape[1] + 1)


def test_noise_changes_only_the_noise_and_is_reported(blobs):
    X, y, client = blobs
    res = fkm.run(X, client, 4, rounds=5, seed=0, noise_multiplier=2.0, clip=5.0)
    assert len(res.dp_events) == 1
    ev = res.dp_events[0]
    assert ev.noise_multipliers == (2.0,) and ev.count == 5 and ev.unit == "sample"
    assert res.info["noise_std"] == pytest.approx(2.0 * np.sqrt(26.0))
    # a tiny noise multiplier gives the same clustering as no noise (noise only perturbs the sums),
    # from the same public initialisation
    quiet = fkm.run(
        X, client, 4, rounds=5, seed=0, noise_multiplier=1e-9, clip=50.0, init="uniform_box", init_domain=[-10, 10]
    )
    clean = fkm.run(X, client, 4, rounds=5, seed=0, init="uniform_box", init_domain=[-10, 10])
    np.testing.assert_allclose(quiet.centroids, clean.centroids, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rounds": 0}, "rounds"),
        ({"clients_per_round": 7}, "clients_per_round"),
        ({"noise_multiplier": 1.0}, "clip"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
    ],
)
def test_bad_parameters_name_the_parameter(blobs, kwargs, match):
    X, y, client = blobs
    with pytest.raises(ValueError, match=match):
        fkm.run(X, client, 4, **kwargs)


def test_more_clusters_than_samples_is_refused():
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match="k=5"):
        fkm.run(X, np.zeros(3, int), 5)
