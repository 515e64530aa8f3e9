"""FedSC (fedclust.clustering.fedsc) and the DSC baseline (fedclust.clustering.dsc); spec 001."""

import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedclust.clustering import dsc, fedsc, spectral
from fedclust.metrics import clustering_accuracy, nmi


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # Small matrices: one BLAS/OpenMP thread avoids oversubscription on shared CI cores.
    with threadpool_limits(1):
        yield


def _split(n, P, seed):
    client = np.arange(n) % P
    np.random.default_rng(seed).shuffle(client)
    return client


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(5, 3))
    Xp = rng.normal(size=(9, 3))
    Cp = rng.normal(size=(5, 9))
    return Z, Xp, Cp


# --------------------------------------------------------------------------- Stage I math
def test_c_step_solves_normal_equations(small):
    Z, Xp, _ = small
    r, lam = 1.3, 1e-2
    Kzz = spectral.gaussian_kernel(Z, Z, r)
    Kzx = spectral.gaussian_kernel(Z, Xp, r)
    C = fedsc.ridge_coefficients(Kzz, Kzx, lam)
    assert np.allclose((Kzz + lam * np.eye(5)) @ C, Kzx, atol=1e-10)
    # and it is the minimizer of f_p(Z, .): any perturbation increases eq. (8)
    f0 = fedsc.local_objective(Z, Xp, C, r, lam)
    E = np.random.default_rng(1).normal(size=C.shape) * 1e-3
    assert fedsc.local_objective(Z, Xp, C + E, r, lam) > f0


def test_z_gradient_matches_finite_differences(small):
    Z, Xp, Cp = small
    r, lam, h = 1.3, 1e-2, 1e-6
    G = fedsc.z_gradient(Z, Xp, Cp, r)
    num = np.zeros_like(Z)
    for i in range(Z.shape[0]):
        for j in range(Z.shape[1]):
            E = np.zeros_like(Z)
            E[i, j] = h
            num[i, j] = (fedsc.local_objective(Z + E, Xp, Cp, r, lam) - fedsc.local_objective(Z - E, Xp, Cp, r, lam)) / (2 * h)
    assert np.allclose(G, num, rtol=1e-5, atol=1e-7)


def test_batched_client_steps_equal_per_client_loop():
    """The zero-padded batched gradient/preconditioner equals a loop over clients of unequal sizes,
    and the official step is the stationary point of the frozen-weight problem (spec 2.5)."""
    rng = np.random.default_rng(4)
    r, d, m = 1.5, 4, 3
    sizes = [5, 9, 2]
    Xs = [rng.normal(size=(s, m)) for s in sizes]
    Cs = [rng.normal(size=(d, s)) for s in sizes]
    Z = rng.normal(size=(d, m))
    Nmax = max(sizes)
    Xpad = np.zeros((3, Nmax, m))
    Cpad = np.zeros((3, Nmax, d))
    for p, (Xp, Cp) in enumerate(zip(Xs, Cs)):
        Xpad[p, : sizes[p]] = Xp
        Cpad[p, : sizes[p]] = Cp.T
    Zb = np.broadcast_to(Z, (3, d, m)).copy()
    Kxz = fedsc._batched_kernel(Xpad, Zb, r * r)
    Kzz = spectral.gaussian_kernel(Z, Z, r)
    G, tau = fedsc._grad_and_tau(Zb, Xpad, Cpad, Kxz, Kzz[None], r * r)
    steps = fedsc.official_z_steps(Z, Xpad, Cpad, Kxz, Kzz, r * r)
    steps_chunked = fedsc.official_z_steps(Z, Xpad, Cpad, Kxz, Kzz, r * r, chunk_bytes=1)  # one client per chunk
    assert np.allclose(steps, steps_chunked)
    for p in range(3):
        assert np.allclose(steps[p], Z - np.linalg.solve(tau[p], G[p]))  # official step, spec 2.5
        assert np.allclose(G[p], fedsc.z_gradient(Z, Xs[p], Cs[p], r))
        assert np.allclose(tau[p], tau[p].T)
        Znew = Z - np.linalg.solve(tau[p], G[p])
        W = -Cs[p].T * spectral.gaussian_kernel(Xs[p], Z, r)
        # frozen weights: grad = W^T X / r^2 + tau Z vanishes at Z_new
        assert np.allclose(W.T @ Xs[p] / r**2 + tau[p] @ Znew, 0.0, atol=1e-9)


# --------------------------------------------------------------------------- end to end
def test_iris_reconstruction_within_2_percent_after_20_rounds(iris):
    X, y = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=20, y=y)
    err = res.history["reconstruction_error"]
    assert len(err) == 20 and err[-1] < 0.02 and err[0] > 0.5
    obj = res.history["objective"]
    assert obj[-1] < 0.1 * obj[0]
    assert res.info["d"] == 7 and res.info["knn_k"] == 6  # spec 7.1: Iris d = 7, k = ceil(ln 150)
    assert res.info["reconstruction_error"] == pytest.approx(err[-1], rel=1e-9)
    # FedSC tracks centralized SC with the same r and graph (spec 7.3)
    sc = spectral.spectral_clustering(X, 3, seed=0, r=res.info["r"])
    assert res.info["ACC"] >= clustering_accuracy(y, sc.labels) - 0.03
    assert res.uploaded_reals == 20 * 8 * 7 * 4 + 7 * 150


@pytest.mark.parametrize("seed", [1, 4])
def test_coil20_fedsc_within_003_of_sc(coil20, seed):
    """Issue criterion on COIL20 (clean): FedSC within 0.03 ACC of centralized SC with the same r and
    graph construction. Seeds 1 and 4 used to give FedSC 0.695 / 0.667 (SC 0.80): ARPACK lost copies of
    the eigenvalue 1 of the disconnected kNN graph (fixed in spectral.spectral_embedding)."""
    X, y = coil20
    client = _split(len(y), 8, seed)
    r = spectral.mean_pairwise_distance(X)
    res = fedsc.run(X, client, 20, seed=seed, r=r, d=194, n_init=10, y=y)
    assert res.info["reconstruction_error"] < 0.01
    sc = spectral.spectral_clustering(X, 20, seed=seed, r=r, n_init=10)
    acc_sc = clustering_accuracy(y, sc.labels)
    assert acc_sc > 0.79
    assert res.info["ACC"] >= acc_sc - 0.03


def test_returned_pair_is_consistent(iris):
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 1), 3, seed=1, rounds=5, return_factors=True)
    Z, C, r, lam = res.info["Z"], res.info["C"], res.info["r"], res.info["lam"]
    # spec 2.6 RESOLUTION: C is recomputed from the returned Z
    assert np.allclose(C, fedsc.ridge_coefficients(spectral.gaussian_kernel(Z, Z, r), spectral.gaussian_kernel(Z, X, r), lam))
    assert res.info["reconstruction_error"] == pytest.approx(fedsc.reconstruction_error(Z, C, X, r))


def test_clean_concentric_circles_clustered_perfectly(circles):
    X, y = circles
    res = fedsc.run(X, _split(len(y), 8, 0), 2, seed=0, y=y)
    assert res.info["ACC"] == 1.0
    assert res.info["d"] == 7


def test_same_seed_same_labels_and_history(iris):
    X, _ = iris
    client = _split(150, 8, 2)
    a = fedsc.run(X, client, 3, seed=3, rounds=6, data_noise_beta=0.1, z_noise_alpha=0.05, c_noise_alpha=0.05)
    b = fedsc.run(X, client, 3, seed=3, rounds=6, data_noise_beta=0.1, z_noise_alpha=0.05, c_noise_alpha=0.05)
    c = fedsc.run(X, client, 3, seed=4, rounds=6, data_noise_beta=0.1, z_noise_alpha=0.05, c_noise_alpha=0.05)
    assert np.array_equal(a.labels, b.labels)
    assert a.history == b.history
    assert a.history["objective"] != c.history["objective"]


def test_gradient_z_step_decreases_objective(iris):
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=15, z_step="gradient", local_steps=2)
    obj = res.history["objective"]
    assert obj[-1] < 0.5 * obj[0]
    assert res.history["reconstruction_error"][-1] < res.history["reconstruction_error"][0]


def test_partial_participation_and_single_client(iris):
    X, y = iris
    half = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=20, participation=0.5)
    assert half.info["participants_per_round"] == 4
    assert half.uploaded_reals == 20 * 4 * 7 * 4 + 7 * 150
    assert half.history["reconstruction_error"][-1] < 0.05
    one = fedsc.run(X, np.zeros(150, dtype=int), 3, seed=0, y=y)  # FedSC with P = 1 (Table 7)
    assert one.info["n_clients"] == 1 and one.info["ACC"] > 0.85


def test_factor_noise_hurts_reconstruction(iris):
    X, _ = iris
    client = _split(150, 8, 0)
    clean = fedsc.run(X, client, 3, seed=0).info["reconstruction_error"]
    noisy_c = fedsc.run(X, client, 3, seed=0, c_noise_alpha=0.3)
    assert noisy_c.info["reconstruction_error"] > 3 * clean
    assert noisy_c.info["c_noise_std"] > 0 and noisy_c.dp_events == []  # alpha*std: no DP event
    assert "dp_note" in noisy_c.info


def test_perturbed_data_with_clipping_reports_gaussian_release(iris):
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=3, clip_tau=5.0, data_noise_std=2.0)
    (ev,) = res.dp_events
    assert ev.noise_multipliers == (pytest.approx(2.0 / 10.0),)  # sigma / (2 tau_X), Prop. 3.7
    assert ev.neighbouring == "replace_one" and ev.count == 1 and ev.unit == "sample"
    assert res.info["data_noise_std"] == 2.0
    beta = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=3, data_noise_beta=0.3)
    assert beta.info["data_noise_std"] == pytest.approx(0.3 * X.std())


def test_theorem_3_9_releases(iris):
    X, _ = iris
    kw = dict(clip_tau=8.0, tau_z=30.0, tau_c=5.0, z_lr=0.05, z_step="gradient", rounds=4, d=5, r=2.5, lam=1e-2)
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=0.1, c_noise_std=0.2, return_factors=True, **kw)
    ez, ec = res.dp_events
    sens = fedsc.factor_sensitivities(d=5, r=2.5, lam=1e-2, tau_x=8.0, tau_z=30.0, tau_c=5.0, z_lr=0.05)
    assert sens["z"] == pytest.approx(2 * math.sqrt(5) * 5.0 * 8.0 * 0.05 / 6.25 * (1 + 38.0 * 46.0 / 6.25))
    assert ez.noise_multipliers[0] == pytest.approx(0.1 / sens["z"]) and ez.count == 3
    ups = np.linalg.norm(res.info["Z"], axis=1).max() + 8.0
    assert ec.noise_multipliers[0] == pytest.approx(0.2 / (2 * math.sqrt(5) * 8.0 * (8.0 + ups) / (1e-2 * 6.25)))
    assert np.linalg.norm(res.info["Z"], ord=2) <= 30.0 + 1e-9
    # the code's matrix-preconditioned step is not covered by Theorem 3.9
    with pytest.raises(ValueError, match="z_step"):
        fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=0.1, **{**kw, "z_step": "official"})


@pytest.mark.parametrize(
    "kw,name",
    [({"rounds": 0}, "rounds"), ({"participation": 0.0}, "participation"), ({"z_step": "adam"}, "z_step"),
     ({"data_noise_std": 0.1, "data_noise_beta": 0.1}, "data_noise_std"), ({"lam": -1.0}, "lam"),
     ({"d": 0}, "d"), ({"z_noise_alpha": -0.1}, "z_noise_alpha"), ({"r_rule": "local"}, "r_rule")],
)
def test_parameter_validation(iris, kw, name):
    X, _ = iris
    with pytest.raises(ValueError, match=name):
        fedsc.run(X, _split(150, 8, 0), 3, **kw)


# --------------------------------------------------------------------------- metrics / baselines
def test_nmi_paper_by_hand():
    y = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    pred = np.array([5, 5, 7, 7, 7, 9, 9, 9])  # bestMap: 5->0, 7->1, 9->2
    assert fedsc.nmi_paper(y, y) == pytest.approx(1.0)
    # by hand: classes/clusters labelled 0 are dropped from the sums; N and the counts are global
    N = 8.0
    Nij = {(1, 1): 2, (2, 2): 3}
    Ni = {1: 2, 2: 3}
    Nj = {1: 3, 2: 3}
    mi = sum(v * math.log(N * v / (Ni[i] * Nj[j])) for (i, j), v in Nij.items())
    h = sum(v * math.log(v / N) for v in Ni.values()) + sum(v * math.log(v / N) for v in Nj.values())
    assert fedsc.nmi_paper(y, pred) == pytest.approx(-2 * mi / h)
    assert fedsc.nmi_paper(y, pred) != pytest.approx(nmi(y, pred))


def test_attack_on_c_and_kmeans_baseline(iris):
    X, y = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, attack=True, y=y)
    lab = res.info["attack_on_c_labels"]
    assert lab.shape == (150,) and set(np.unique(lab)) <= {0, 1, 2}
    assert 0.34 < res.info["attack_on_c_ACC"] < res.info["ACC"]  # leaks some structure, less than FedSC
    km = fedsc.centralized_kmeans(X, 3, seed=0, y=y)
    assert km.info["ACC"] > 0.85 and km.centroids.shape == (3, 4)


def test_dsc_local_embedding_solves_random_walk_eigenproblem():
    rng = np.random.default_rng(0)
    Xl = rng.normal(size=(40, 2))
    V = dsc.local_embedding(Xl, 3)
    S = np.exp(-spectral.sq_distances(Xl, Xl))
    W = spectral.knn_graph(lambda s, e: S[s:e], 40, spectral.knn_k(40), include_self=False).toarray()
    D = W.sum(1)
    for c in range(3):
        v = V[:, c]
        mu = (v @ W @ v) / (v @ (D * v))
        assert np.allclose(W @ v, mu * D * v, atol=1e-8)  # W v = mu D v
    assert np.allclose(np.linalg.norm(V, axis=0), 1.0)


def test_dsc_is_deterministic_and_worse_than_sc_on_circles(circles):
    X, y = circles
    accs = []
    for seed in range(3):
        client = _split(len(y), 8, seed)
        a = dsc.run(X, client, 2, seed=seed, y=y)
        b = dsc.run(X, client, 2, seed=seed)
        assert np.array_equal(a.labels, b.labels)
        assert a.centroids.shape == (2, 2)
        accs.append(a.info["ACC"])
    sc = spectral.spectral_clustering(X, 2, seed=0, y=y)
    assert sc.info["ACC"] == 1.0 and np.mean(accs) < 0.9
