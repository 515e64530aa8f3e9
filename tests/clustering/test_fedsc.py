"""FedSC (fedclust.clustering.fedsc) and the DSC baseline (fedclust.clustering.dsc); spec 001."""

import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedclust.clustering import dsc, fedsc, spectral
from fedclust.metrics import clustering_accuracy, nmi
from fedclust.privacy.accountants import epsilon


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
            num[i, j] = (
                fedsc.local_objective(Z + E, Xp, Cp, r, lam) - fedsc.local_objective(Z - E, Xp, Cp, r, lam)
            ) / (2 * h)
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
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=20, y=y, final_c="paper")
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
    # final_c="projection" (default): the same rounds, a final C closer to K than the last round's ridge C
    res2 = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=20, y=y)
    assert res2.history == res.history
    assert res2.info["reconstruction_error"] < err[-1]


#: Seeds of the accuracy tests below, fixed before looking at their results (split, init and k-means).
ACCURACY_SEEDS = (0, 1, 2)


@pytest.mark.slow
def test_coil20_fedsc_matches_sc_on_average(coil20):
    """COIL20 (clean): FedSC's ACC is within 0.02 of centralized SC (same r and graph), on the mean over
    three fixed seeds. The bound: over three trials both methods vary by about 0.003 (FedSC 0.801 +- 0.003,
    SC 0.803 +- 0.001, benchmarks/bench_fedsc.py), so 0.02 is several standard deviations of slack, while
    the failure this guards against (the eigensolver losing copies of the eigenvalue 1 of the disconnected
    kNN graph: 0.67-0.73 on a seed) moves the mean of three seeds by more than 0.02."""
    X, y = coil20
    r = spectral.mean_pairwise_distance(X)
    fed, cen = [], []
    for seed in ACCURACY_SEEDS:
        res = fedsc.run(X, _split(len(y), 8, seed), 20, seed=seed, r=r, d=194, n_init=10, y=y)
        assert res.info["reconstruction_error"] < 0.01
        fed.append(res.info["ACC"])
        cen.append(clustering_accuracy(y, spectral.spectral_clustering(X, 20, seed=seed, r=r, n_init=10).labels))
    assert np.mean(cen) > 0.79, cen
    assert np.mean(fed) >= np.mean(cen) - 0.02, (fed, cen)


def test_returned_pair_is_consistent(iris):
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 1), 3, seed=1, rounds=5, return_factors=True, final_c="paper")
    Z, C, r, lam = res.info["Z"], res.info["C"], res.info["r"], res.info["lam"]
    # spec 2.6 RESOLUTION: C is recomputed from the returned Z
    assert np.allclose(
        C, fedsc.ridge_coefficients(spectral.gaussian_kernel(Z, Z, r), spectral.gaussian_kernel(Z, X, r), lam)
    )
    assert res.info["reconstruction_error"] == pytest.approx(fedsc.reconstruction_error(Z, C, X, r))
    # final_c="projection" (default): the same Stage I, the final C-step with the jitter instead of lam
    res2 = fedsc.run(X, _split(150, 8, 1), 3, seed=1, rounds=5, return_factors=True)
    assert res2.info["final_c"] == "projection" and np.array_equal(res2.info["Z"], Z)
    Kzz, Kzx = spectral.gaussian_kernel(Z, Z, r), spectral.gaussian_kernel(Z, X, r)
    assert np.allclose(res2.info["C"], fedsc.ridge_coefficients(Kzz, Kzx, fedsc.PROJECTION_JITTER))
    assert res2.info["reconstruction_error"] == pytest.approx(fedsc.reconstruction_error(Z, res2.info["C"], X, r))
    assert res2.info["reconstruction_error"] < res.info["reconstruction_error"]


def test_run_is_the_composition_of_its_stages(iris):
    """run = privatize_data -> kernel_constants -> stage1 -> reconstruct_and_cluster (issue 15's split):
    composing the stage functions by hand gives run's Z, C and labels exactly."""
    X, _ = iris
    client = _split(150, 8, 2)
    res = fedsc.run(X, client, 3, seed=2, rounds=6, data_noise_beta=0.1, return_factors=True, final_c="paper")
    Xt, sigma, is_dp, events, _ = fedsc.privatize_data(
        X, clip_tau=None, data_noise_std=0.0, data_noise_beta=0.1, seed=2
    )
    assert sigma == pytest.approx(0.1 * X.std()) and not is_dp and len(events) == 1
    info: dict = {}
    r, d = fedsc.kernel_constants(
        Xt, client, fedsc.FedSCOptions(seed=2), on_private_data=False, perturbed=True, info=info, events=[]
    )
    assert (r, d) == (res.info["r"], res.info["d"])
    layout = fedsc.ClientLayout(Xt, client, np.bincount(client))
    o = fedsc.FedSCOptions(seed=2, rounds=6, lam=1e-3, z_step="official", local_steps=1, participation=1.0)
    s1 = fedsc.stage1(Xt, layout, o, d=d, r=r, track=True)
    assert np.array_equal(s1["Z"], res.info["Z"]) and np.array_equal(s1["C"], res.info["C"])
    assert s1["history"] == res.history
    labels, _ = fedsc.reconstruct_and_cluster(s1["Z"], s1["C"], 3, r, seed=2)
    assert np.array_equal(labels, res.labels)


def test_final_c_projection_is_not_used_by_the_factor_variant(iris):
    """The perturbed-factor variant releases the paper's ridge C (its sensitivities and Theorem 3.9 are
    defined with lam): final_c="projection" must not change what it releases."""
    X, _ = iris
    kw = dict(
        seed=3,
        rounds=4,
        d=5,
        r=2.5,
        lam=1e-2,
        tau_c=5.0,
        tau_z=30.0,
        z_step="gradient",
        z_lr=0.05,
        c_noise_std=0.1,
        z_noise_std=0.1,
        return_uploads=True,
    )
    a = fedsc.run(X, _split(150, 8, 3), 3, final_c="projection", **kw)
    b = fedsc.run(X, _split(150, 8, 3), 3, final_c="paper", **kw)
    assert a.info["final_c"] == b.info["final_c"] == "paper"
    assert np.array_equal(a.info["uploads"]["C_released"], b.info["uploads"]["C_released"])
    with pytest.raises(ValueError, match="final_c"):
        fedsc.run(X, _split(150, 8, 3), 3, final_c="nystrom")


@pytest.mark.slow
def test_digits_fedsc_matches_sc_on_average():
    """scikit-learn's digits (n = 1797, 10 classes; clean, r and d rules, d = 287): FedSC's ACC is within
    0.04 of SC's on the mean over three fixed seeds. SC on digits at k = ceil(ln n) = 8 sits on a knife
    edge: on some splits classes 3 and 9 merge and a run drops by about 0.08 (FedSC 0.81 against SC 0.89).
    The bound allows one such seed in three (0.08 / 3 = 0.027) and fails the systematic gap of the
    paper's final C-step (ridge lam = 1e-3, ``final_c="paper"``: 0.049 below SC on the mean of five seeds,
    benchmarks/bench_fedsc.py --diagnose-digits), which the default projection closes."""
    from sklearn.datasets import load_digits

    dg = load_digits()
    X, y = dg.data.astype(np.float64), dg.target
    r = spectral.mean_pairwise_distance(X)
    fed, cen = [], []
    for seed in ACCURACY_SEEDS:
        res = fedsc.run(X, _split(len(y), 8, seed), 10, seed=seed, r=r, y=y, track_reconstruction=False)
        assert res.info["d"] == 287 and res.info["final_c"] == "projection"
        fed.append(res.info["ACC"])
        cen.append(clustering_accuracy(y, spectral.spectral_clustering(X, 10, seed=seed, r=r).labels))
    assert np.mean(cen) > 0.85, cen
    assert np.mean(fed) >= np.mean(cen) - 0.04, (fed, cen)


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
    assert noisy_c.info["c_noise_std"] > 0
    # alpha * std(C_p) is a noise scale read from the data: a named non-DP release, epsilon = inf
    labels = [e.label for e in noisy_c.dp_events if not e.is_private]
    assert any("alpha * std(C_p)" in lab for lab in labels)
    assert epsilon(noisy_c.dp_events, 1e-5) == math.inf
    assert noisy_c.info["privacy_notes"]


def test_perturbed_data_with_clipping_reports_gaussian_release(iris):
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=3, clip_tau=5.0, data_noise_std=2.0)
    (ev,) = res.dp_events
    assert ev.noise_multipliers == (pytest.approx(2.0 / 10.0),)  # sigma / (2 tau_X), Prop. 3.7
    assert ev.neighbouring == "replace_one" and ev.count == 1 and ev.unit == "sample"
    assert res.info["data_noise_std"] == 2.0
    # r and d are estimated on the perturbed data: post-processing, no further release
    assert res.info["r_source"].endswith("perturbed data") and res.info["d_source"].endswith("perturbed data")
    beta = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=3, data_noise_beta=0.3)
    assert beta.info["data_noise_std"] == pytest.approx(0.3 * X.std())


def test_beta_noise_with_clipping_is_not_dp(iris):
    """Issue 13 point 6: sigma = beta * std(X) reads the private data, so even with clipped rows the
    release is not a Gaussian mechanism (the old code recorded it as one, with a finite epsilon)."""
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=2, clip_tau=5.0, data_noise_beta=0.3)
    assert epsilon(res.dp_events, 1e-5) == math.inf
    assert any("beta * std(X)" in e.label for e in res.dp_events)


# --------------------------------------------------------------------------- perturbed factors (issue 13, point 6)
_FACTORS = dict(clip_tau=8.0, tau_z=30.0, tau_c=5.0, z_lr=0.05, z_step="gradient", rounds=4, d=5, r=2.5, lam=1e-2)


def _delta_z(d, r, tau_c, z_lr):
    # per-sample gradient term: ||g_i||_F <= tau_c (1 + sqrt(d) tau_c) max_t t exp(-t^2/2r^2) / r^2
    return 2 * z_lr * tau_c * (1 + math.sqrt(d) * tau_c) * (r * math.exp(-0.5)) / r**2


def test_factor_releases_use_per_sample_sensitivities(iris):
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=0.1, c_noise_std=0.2, return_factors=True, **_FACTORS)
    ez, ec = res.dp_events
    dz = _delta_z(5, 2.5, 5.0, 0.05)
    assert ez.noise_multipliers[0] == pytest.approx(0.1 / dz) and ez.count == 3  # rounds 2..4 depend on data
    assert ec.noise_multipliers[0] == pytest.approx(0.2 / (2 * 5.0)) and ec.count == 1
    sens = fedsc.factor_sensitivities(d=5, r=2.5, tau_c=5.0, z_lr=0.05, lam=1e-2, tau_x=8.0, tau_z=30.0)
    assert sens["z"] == pytest.approx(dz) and sens["c"] == 10.0
    # Theorem 3.9's values are kept for reference (spec 3.4), not used by the accountant
    assert sens["z_paper"] == pytest.approx(2 * math.sqrt(5) * 5.0 * 8.0 * 0.05 / 6.25 * (1 + 38.0 * 46.0 / 6.25))
    assert sens["c_paper"] == pytest.approx(2 * math.sqrt(5) * 8.0 * 46.0 / (1e-2 * 6.25))
    assert np.linalg.norm(res.info["Z"]) <= 30.0 + 1e-9  # Frobenius clip, hence also ||Z||_sp <= tau_z
    assert epsilon(res.dp_events, 1e-5) < math.inf
    # the code's matrix-preconditioned step is not covered
    with pytest.raises(ValueError, match="z_step"):
        fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=0.1, **{**_FACTORS, "z_step": "official"})


def test_factor_sensitivities_bound_the_uploads():
    """Replace sample 0 (client 0): with the same seed (same random init, same server Z in round 1),
    the noise-free round-2 uploads differ by at most Delta_Z, and column 0 of C by at most 2 tau_c."""
    X = np.random.default_rng(1).normal(size=(60, 3)) * 0.7
    client = np.arange(60) % 4
    kw = dict(
        rounds=2, tau_c=0.3, z_lr=1.0, r=1.0, d=4, lam=1e-2, z_step="gradient", return_uploads=True, cluster=False
    )
    sens = fedsc.factor_sensitivities(d=4, r=1.0, tau_c=0.3, z_lr=1.0)
    rng = np.random.default_rng(0)
    worst_z = worst_c = 0.0
    for t in range(25):
        X2 = X.copy()
        X2[0] = rng.normal(size=3) * 2.0
        a = fedsc.run(X, client, 3, seed=t, **kw).info["uploads"]
        b = fedsc.run(X2, client, 3, seed=t, **kw).info["uploads"]
        assert np.allclose(a["Z_server"][0], b["Z_server"][0])  # round 1 uploads the random init
        dz = np.linalg.norm(a["Z_clean"][0] - b["Z_clean"][0], axis=(1, 2))
        assert np.all(dz[1:] == 0)  # only the client holding the sample moves
        worst_z = max(worst_z, dz[0] / sens["z"])
        worst_c = max(worst_c, np.linalg.norm(a["C_clean"][:, 0] - b["C_clean"][:, 0]) / sens["c"])
    assert 0.2 < worst_z <= 1.0 and 0.5 < worst_c <= 1.0  # sound, and not vacuous


def test_dictionary_clip_is_non_expansive():
    """Issue 13 point 6: the bound on Z applied before the noise must not stretch distances. Rescaling
    to spectral norm <= tau (the old projection) does: A = I_5 stays, B = diag(1 + t, 1, 1, 1, 1) is
    divided by 1 + t, so four diagonal entries move and the distance grows by up to sqrt(rank - 1) = 2.
    The Frobenius clip is a Euclidean projection onto a convex set: never expansive."""

    def spectral_rescale(Z, tau):
        return Z * min(1.0, tau / np.linalg.norm(Z, 2))

    A, B = np.eye(5), np.diag([1.01, 1.0, 1.0, 1.0, 1.0])
    old = np.linalg.norm(spectral_rescale(A, 1.0) - spectral_rescale(B, 1.0))
    assert old > 1.9 * np.linalg.norm(A - B)  # the old rule expands this pair almost twofold
    rng = np.random.default_rng(0)
    pairs = [(A, B)] + [(rng.normal(size=(4, 3)) * 3, rng.normal(size=(4, 3)) * 3) for _ in range(200)]
    for P, Q in pairs:
        assert (
            np.linalg.norm(fedsc.clip_frobenius(P, 1.0) - fedsc.clip_frobenius(Q, 1.0)) <= np.linalg.norm(P - Q) + 1e-12
        )
    batch = fedsc.clip_frobenius(np.stack([A * 3, B * 0.1]), 1.0)
    assert np.linalg.norm(batch[0]) == pytest.approx(1.0) and np.allclose(batch[1], B * 0.1)


def test_private_factor_run_with_data_rules_reports_inf(iris):
    """Issue 13 point 6: r and d from the raw data are not private; with public r and d the run is DP."""
    X, _ = iris
    kw = {k: v for k, v in _FACTORS.items() if k not in ("r", "d")}
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=0.1, c_noise_std=0.2, **kw)
    assert epsilon(res.dp_events, 1e-5) == math.inf
    steps = " ".join(e.label for e in res.dp_events if not e.is_private)
    assert "kernel width r" in steps and "dictionary size d" in steps
    ok = fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=0.1, c_noise_std=0.2, **_FACTORS)
    assert all(e.is_private for e in ok.dp_events) and ok.info["r_source"] == "given"


@pytest.mark.parametrize("noise,missing", [({"z_noise_std": 0.1}, "C upload"), ({"c_noise_std": 0.2}, "Z_p uploads")])
def test_factor_sent_without_noise_is_not_dp(iris, noise, missing):
    """Issue 13 point 6: noise on one factor only releases the other one in the clear (the old code
    gave a finite epsilon for the noisy factor alone)."""
    X, _ = iris
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, **noise, **_FACTORS)
    assert epsilon(res.dp_events, 1e-5) == math.inf
    assert any(missing in e.label and "no noise" in e.label for e in res.dp_events)


def test_private_run_notes_reach_the_privacy_report(iris):
    """Issue 13 points 6-7: the library's privacy notes (what is covered, what is evaluation) reach
    privacy.json through the shared report node, which reads ``info["privacy_notes"]``."""
    from fedclust.pipelines.privacy.nodes import report_privacy

    X, _ = iris
    cal = {"mechanism": "gaussian", "unit": "sample", "delta": 1e-5}
    beta = fedsc.run(X, _split(150, 8, 0), 3, seed=0, rounds=2, data_noise_beta=0.3)
    rep = report_privacy(beta, cal, {"delta": 1e-5}, "fedsc")
    assert rep["epsilon"] == "inf" and "beta * std(X)" in " ".join(rep["notes"])
    # noise multipliers near 1 keep the PLD accountant of the report fast
    res = fedsc.run(X, _split(150, 8, 0), 3, seed=0, z_noise_std=5.0, c_noise_std=10.0, **_FACTORS)
    rep = report_privacy(res, cal, {"delta": 1e-5}, "fedsc")
    text = " ".join(rep["notes"])
    assert "outside the guarantee" in text and "reconstruction_error" in text and "per-sample sensitivities" in text
    assert rep["private"] is True and rep["epsilon"] != "inf"


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


# --------------------------------------------------------------------------- Stage II graph (issue 17)
def test_fedsc_stage_ii_graph_parameter_warns_and_recovers_planted_clusters():
    # 3 planted clusters of 4 tight groups of 15: the paper's kNN graph (k = 6) keeps the groups apart
    rng = np.random.default_rng(0)
    X, y = [], []
    for c in range(3):
        centre = 12.0 * np.array([np.cos(2 * np.pi * c / 3), np.sin(2 * np.pi * c / 3)])
        for j in range(4):
            X.append(
                centre
                + 4.0 * np.array([np.cos(np.pi * j / 2), np.sin(np.pi * j / 2)])
                + 0.2 * rng.standard_normal((15, 2))
            )
            y += [c] * 15
    X, y = np.vstack(X), np.array(y)
    client = _split(len(y), 4, 0)
    with pytest.warns(spectral.DisconnectedGraphWarning, match="connected components for 3 clusters"):
        paper = fedsc.run(X, client, 3, seed=0, rounds=5, y=y, graph="paper")
    assert paper.info["graph_components"] > 3 and paper.info["ACC"] < 0.8, paper.info
    for graph in ("min_connected_k", "mst"):
        res = fedsc.run(X, client, 3, seed=0, rounds=5, y=y, graph=graph)
        assert res.info["graph"] == graph and res.info["graph_components"] < 3
        assert res.info["graph_components_paper"] == paper.info["graph_components"]
        assert res.info["ACC"] == 1.0, graph
        # the reconstruction error is accumulated once although mst/min_connected_k read K_hat again
        assert res.info["reconstruction_error"] == pytest.approx(paper.info["reconstruction_error"])
    with pytest.raises(ValueError, match="graph"):
        fedsc.run(X, client, 3, graph="full")
