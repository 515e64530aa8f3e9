"""Tests for FedCAvg / FedCGds / FedCPALM / centralized SNCP / K-means++ (spec 003)."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.clustering import fedc_mf as F
from fedclust.metrics import clustering_accuracy


def _linear(n=400, m=60, k=4, snr_db=-3.0, seed=0):
    """Small X = W H + E (rows = samples) with one-hot H, as in spec 4.1."""
    rng = np.random.default_rng(seed)
    W = rng.uniform(0, 1, size=(m, k))
    y = rng.integers(0, k, size=n)
    S = W.T[y]
    E = rng.standard_normal((n, m))
    E *= np.sqrt(np.sum(S**2) / 10 ** (snr_db / 10) / np.sum(E**2))
    return S + E, y


def _unequal_clients(n, P, seed=0):
    """Unequal client sizes (every client non-empty), shuffled."""
    rng = np.random.default_rng(seed)
    sizes = rng.multinomial(n - P, rng.dirichlet(np.ones(P) * 0.5)) + 1
    client = np.repeat(np.arange(P), sizes)
    return rng.permutation(client)


def _objective(X, W, H, rho, nu):
    """F of eq. (104) written out directly (columns = samples)."""
    N = X.shape[0]
    fit = np.sum((X.T - W @ H) ** 2) / N
    col = H.sum(0)
    return fit + 0.5 * rho * (np.sum(col**2) - np.sum(H**2)) + 0.5 * nu * np.sum(H**2)


X0, Y0 = _linear()
N0, M0 = X0.shape
K0 = 4
C0 = _unequal_clients(N0, 10, seed=1)


def _nonincreasing(f, rel=1e-10):
    f = np.asarray(f)
    return np.all(np.diff(f) <= rel * np.abs(f[:-1]))


# --------------------------------------------------------------------------- descent properties
def test_h_steps_alone_decrease_objective():
    # Q2 = 0: only projected H steps (c = (gamma/2) L_H exact); with a strongly nonconvex penalty
    r = F.run_sncp(X0, K0, seed=0, rounds=30, Q1=1, Q2=0, rho=1e-2, continuation=None)
    f = [r.info["objective0"]] + r.history["objective"]
    assert _nonincreasing(f)
    assert f[-1] < f[0] * 0.99  # and it actually moves


def test_centralized_palm_objective_nonincreasing():
    r = F.run_sncp(X0, K0, seed=1, rounds=60, rho=1e-2, nu=1e-4, continuation=None)
    f = [r.info["objective0"]] + r.history["objective"]
    assert _nonincreasing(f)
    assert f[-1] < 0.9 * f[0]


def test_fedcgds_partial_participation_objective_nonincreasing():
    # Theorem 3: F is non-increasing along every realization, also with m < P (exact-Lipschitz steps;
    # the paper's literal rule gives no such guarantee for clients with N_p <= 2 or a large rho)
    r = F.run_fedcgds(X0, C0, K0, rounds=25, Q1=5, Q2=5, clients_per_round=3, seed=2, rho=1e-3)
    f = [r.info["objective0"]] + r.history["objective"]
    assert _nonincreasing(f)
    assert f[-1] < f[0]


def test_sncp_continuation_rho_schedule_and_monotone_within_stages():
    r = F.run_sncp(X0, K0, seed=3, rounds=400, rho_tol=1e-3, tol=1e-8)
    h = r.history
    rho = np.asarray(h["rho"])
    f = np.asarray(h["objective"])
    eps = np.asarray(h["eps"])
    ratios = rho[1:] / rho[:-1]
    changed = ~np.isclose(ratios, 1.0)
    assert changed.sum() == r.info["n_rho_updates"] > 3
    assert np.allclose(ratios[changed], 1.5)
    # rho grows right after a round whose eps fell below rho_tol, never otherwise
    assert np.all(eps[:-1][changed] < 1e-3)
    assert np.all(eps[:-1][~changed] >= 1e-3)
    # within a stage F never increases (A8: the jump at a rho change is not compared)
    same = ~changed
    assert np.all(f[1:][same] <= f[:-1][same] * (1 + 1e-10))
    # the first eps after a rho change is measured against the re-evaluated iterate, so it stays small
    assert r.info["stop_reason"] in ("converged", "max_rounds")
    if r.info["stop_reason"] == "converged":
        assert eps[-1] < 1e-8


def _rho_change_rounds(r):
    """1-based rounds after which rho was raised (the round whose test fired)."""
    rho = np.asarray(r.history["rho"])
    return np.flatnonzero(~np.isclose(rho[1:] / rho[:-1], 1.0)) + 1


def test_fedcgds_epoch_trigger_tests_eps_once_per_window_of_P_over_m_rounds():
    # issue 17: with m = 2 of P = 10 clients, the paper's per-round test raises rho in rounds in a row
    # (a round whose few sampled clients barely move looks converged), so rho grows while most clients
    # never saw the previous rho; rho_trigger="epoch" measures eps over ceil(P/m) = 5 rounds (one
    # expected participation per client) and tests it only then.
    kw = dict(rounds=120, Q1=5, Q2=5, clients_per_round=2, seed=4, continuation="sncp", rho_tol=2e-2, tol=0.0)
    paper = F.run_fedcgds(X0, C0, K0, rho_trigger="round", **kw)
    epoch = F.run_fedcgds(X0, C0, K0, rho_trigger="epoch", **kw)
    assert F.run_fedcgds(X0, C0, K0, rounds=1, clients_per_round=2).info["rho_trigger"] == "round"  # default
    assert epoch.info["rho_trigger"] == "epoch" and epoch.info["test_window"] == 5
    assert paper.info["test_window"] == 1
    ch_paper, ch_epoch = _rho_change_rounds(paper), _rho_change_rounds(epoch)
    assert np.diff(ch_paper).min() < 5  # the cascade the per-round test allows
    assert ch_epoch.size >= 3
    assert np.all(ch_epoch % 5 == 0)  # tested only at the end of a window (no stop or rho change between)
    assert np.diff(ch_epoch).min() >= 5
    # the window's eps is the relative change of F over the window, from the re-evaluated iterate (A8)
    f = np.asarray(epoch.history["objective"])
    plain = [c for c in ch_epoch if c > 5 and c - 5 not in ch_epoch]  # window starts at a plain round end
    assert plain
    for c in plain:
        assert abs(f[c - 1] - f[c - 6]) / f[c - 6] < 2e-2


def test_fedcgds_epoch_trigger_is_the_paper_rule_at_full_participation():
    kw = dict(rounds=60, Q1=3, Q2=3, seed=1, continuation="sncp", rho_tol=1e-3, init=F.make_init(X0, K0, 1))
    a = F.run_fedcgds(X0, C0, K0, rho_trigger="round", **kw)
    b = F.run_fedcgds(X0, C0, K0, rho_trigger="epoch", **kw)
    assert b.info["test_window"] == 1 and a.info["n_rho_updates"] > 3
    for key in ("objective", "rho", "eps"):
        np.testing.assert_array_equal(a.history[key], b.history[key])
    np.testing.assert_array_equal(a.labels, b.labels)


# --------------------------------------------------------------------------- exact equalities
def test_fedcavg_one_step_equals_centralized_palm_step():
    """FedCAvg, all clients, Q1 = Q2 = 1, global L_W: one round = one PALM step (3a)-(3b), d = gamma L_W."""
    init = F.make_init(X0, K0, 5)
    gamma, rho, nu = 1.3, 1e-3, 1e-5
    r = F.run_fedcavg(X0, C0, K0, rounds=1, Q1=1, Q2=1, lw="global", gamma=gamma, rho=rho, nu=nu, init=init)
    W0 = np.clip(init["W"], X0.min(), X0.max())
    H0 = init["H"]
    N = N0
    hess = (2 / N) * W0.T @ W0 + rho * np.ones((K0, K0)) + (nu - rho) * np.eye(K0)
    L_H = np.abs(np.linalg.eigvalsh(hess)).max()
    grad_H = (2 / N) * W0.T @ (W0 @ H0 - X0.T) + rho * H0.sum(0, keepdims=True) + (nu - rho) * H0
    H1 = np.maximum(H0 - grad_H / (gamma / 2 * L_H), 0)
    L_W = (2 / N) * np.linalg.eigvalsh(H1 @ H1.T)[-1]
    grad_W = (2 / N) * (W0 @ H1 @ H1.T - X0.T @ H1.T)
    W1 = np.clip(W0 - grad_W / (gamma * L_W), X0.min(), X0.max())
    np.testing.assert_allclose(r.centroids, W1.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(r.labels, np.argmax(H1, axis=0))
    np.testing.assert_allclose(r.history["objective"][0], _objective(X0, W1, H1, rho, nu), rtol=1e-10)


def test_fedcavg_closed_form_equals_per_client_loop():
    """The batched affine form of the Q2 unprojected local W steps equals running them client by client."""
    init = F.make_init(X0, K0, 6)
    gamma, Q1, Q2 = 1.2, 3, 7
    r = F.run_fedcavg(X0, C0, K0, rounds=1, Q1=Q1, Q2=Q2, gamma=gamma, init=init, lw="clients")
    W = np.clip(init["W"], X0.min(), X0.max())
    H = init["H"].copy()
    N = N0
    hess = (2 / N) * W.T @ W + 1e-8 * np.ones((K0, K0)) + (1e-10 - 1e-8) * np.eye(K0)
    step = 2 / (gamma * np.abs(np.linalg.eigvalsh(hess)).max())
    for _ in range(Q1):
        H = np.maximum(H - step * ((2 / N) * W.T @ (W @ H - X0.T) + 1e-8 * H.sum(0) + (1e-10 - 1e-8) * H), 0)
    P = C0.max() + 1
    n_p = np.bincount(C0)
    L_p = np.array([(2 / n_p[p]) * np.linalg.eigvalsh(H[:, C0 == p] @ H[:, C0 == p].T)[-1] for p in range(P)])
    d = gamma * np.sqrt(np.sum(n_p / N * L_p**2))
    avg = np.zeros_like(W)
    for p in range(P):  # the naive per-client loop of eq. (12)
        Xp, Hp, Wp = X0[C0 == p].T, H[:, C0 == p], W.copy()
        for _ in range(Q2):
            Wp = Wp - (2 / n_p[p]) * (Wp @ Hp @ Hp.T - Xp @ Hp.T) / d
        avg += n_p[p] / N * Wp
    np.testing.assert_allclose(r.centroids, np.clip(avg, X0.min(), X0.max()).T, rtol=1e-9, atol=1e-10)


def test_fedcgds_running_sums_equal_recomputation_and_idle_clients_keep_H():
    data = F._Data(X0, C0, K0)
    W, H = F._resolve_init(None, X0, data, 7)
    eng = F._GdsEngine(
        data,
        W,
        H,
        1e-3,
        1e-6,
        steps=F._Steps(Q1=4, Q2=3, gamma=1.1, step_rule="lipschitz"),
        m=3,
        rng=np.random.default_rng(0),
        recompute_stats=False,
        central=False,
    )
    for s in range(1, 13):
        H_before = eng.H.copy()
        eng.round(s)
        idle = ~np.isin(data.cid, eng.last_active)
        np.testing.assert_array_equal(eng.H[:, idle], H_before[:, idle])
        assert not np.allclose(eng.H[:, ~idle], H_before[:, ~idle])
        assert (eng.H >= 0).all()
        assert eng.W.min() >= data.lo and eng.W.max() <= data.hi
    N = data.N
    np.testing.assert_allclose(eng.G1, (2 / N) * eng.H @ eng.H.T, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(eng.G2, (2 / N) * data.X.T @ eng.H.T, rtol=1e-10, atol=1e-13)
    # and the server-side objective from (G1, G2) equals the direct one
    direct = _objective(data.X, eng.W, eng.H, 1e-3, 1e-6)
    assert eng.objective() == pytest.approx(direct, rel=1e-10)


def test_fedcgds_full_participation_equals_centralized():
    """FedCGds with m = P is centralized PALM/BCD (spec 2.7): same iterates as run_sncp."""
    init = F.make_init(X0, K0, 8)
    kw = dict(rounds=15, Q1=3, Q2=4, init=init, rho=1e-3, continuation=None)
    a = F.run_fedcgds(X0, C0, K0, **kw)
    b = F.run_sncp(X0, K0, **kw)
    np.testing.assert_allclose(a.centroids, b.centroids, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(a.history["objective"], b.history["objective"], rtol=1e-10)


def test_fedcpalm_chunking_does_not_change_results():
    init = F.make_init(X0, K0, 9)
    a = F.run_fedcpalm(X0, C0, K0, rounds=4, local_steps=3, init=init)
    b = F.run_fedcpalm(X0, C0, K0, rounds=4, local_steps=3, init=init, max_block_elems=1)  # one client a chunk
    np.testing.assert_allclose(a.centroids, b.centroids, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(a.labels, b.labels)
    # with a single client FedCPALM is local PALM: F non-increasing
    c = F.run_fedcpalm(X0, np.zeros(N0, int), K0, rounds=20, local_steps=2, init=init, rho=1e-3)
    assert _nonincreasing([c.info["objective0"]] + c.history["objective"])


# --------------------------------------------------------------------------- accounting, projections
def test_communication_counts_match_formulas():
    P, MK, K2 = 10, M0 * K0, K0 * K0
    avg = F.run_fedcavg(X0, C0, K0, rounds=5, Q1=2, Q2=2)
    assert avg.history["comm_reals"] == [s * P * MK for s in range(1, 6)]
    assert avg.uploaded_reals == 5 * P * MK
    gds = F.run_fedcgds(X0, C0, K0, rounds=4, Q1=2, Q2=2, clients_per_round=3)
    assert gds.history["comm_reals"] == [s * 3 * (MK + K2) for s in range(1, 5)]
    assert gds.uploaded_reals == 4 * 3 * (MK + K2)
    assert gds.info["init_upload_reals"] == P * (MK + K2)
    palm = F.run_fedcpalm(X0, C0, K0, rounds=3, local_steps=1)
    assert palm.uploaded_reals == 3 * P * MK
    assert F.run_sncp(X0, K0, rounds=3, continuation=None).uploaded_reals == 0


def test_diminishing_q2_schedule():
    r = F.run_fedcavg(X0, C0, K0, rounds=3, Q1=1, q_hat=10)
    assert r.info["Q2_last"] == 10 // 3 + 1
    r = F.run_fedcavg(X0, C0, K0, rounds=12, Q1=1, q_hat=10)
    assert r.info["Q2_last"] == 1


@pytest.mark.parametrize("runner", ["avg", "gds", "palm"])
def test_projections_hold(runner):
    # a uniform W0 far outside the data's range of most coordinates, and the paper step rule
    init = F.make_init(X0, K0, 10, w_init="uniform")
    init["W"] = init["W"] * 5
    if runner == "avg":
        r = F.run_fedcavg(X0, C0, K0, rounds=5, Q1=2, Q2=20, lw="global", init=init)
    elif runner == "gds":
        r = F.run_fedcgds(X0, C0, K0, rounds=5, Q1=2, Q2=20, init=init, step_rule="paper")
    else:
        r = F.run_fedcpalm(X0, C0, K0, rounds=5, local_steps=3, init=init)
    assert r.centroids.min() >= X0.min() and r.centroids.max() <= X0.max()
    assert np.isfinite(r.history["objective"]).all()


# --------------------------------------------------------------------------- clustering quality
def test_well_separated_linear_model_is_clustered():
    X, y = _linear(n=600, m=80, k=5, snr_db=0.0, seed=11)
    client = _unequal_clients(600, 12, seed=2)
    # tau_rho = 1e-3 (instead of the paper's 2e-5) keeps the continuation short for a unit test
    gds = F.run_fedcgds(
        X, client, 5, rounds=200, Q1=20, Q2=20, clients_per_round=6, seed=0, continuation="sncp", rho_tol=1e-3, y=y
    )
    assert gds.info["stop_reason"] == "converged" and gds.info["n_rho_updates"] > 10
    assert clustering_accuracy(y, gds.labels) >= 0.95
    assert gds.history["ACC"][-1] == pytest.approx(clustering_accuracy(y, gds.labels))
    sncp = F.run_sncp(X, 5, seed=0, rounds=400, rho_tol=1e-3, y=y)
    assert clustering_accuracy(y, sncp.labels) >= 0.95
    km = F.run_kmeanspp(X, 5, seed=0, y=y, n_init=5)
    assert km.history["ACC"][0] >= 0.95


def test_same_seed_same_result_and_seed_changes_sampling():
    kw = dict(rounds=6, Q1=2, Q2=2, clients_per_round=4, continuation="sncp", rho_tol=1e-2)
    a = F.run_fedcgds(X0, C0, K0, seed=3, **kw)
    b = F.run_fedcgds(X0, C0, K0, seed=3, **kw)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.history == b.history
    c = F.run_fedcgds(X0, C0, K0, seed=4, **kw)
    assert not np.array_equal(a.centroids, c.centroids)
    k1, k2 = F.run_kmeanspp(X0, K0, 5), F.run_kmeanspp(X0, K0, 5)
    np.testing.assert_array_equal(k1.labels, k2.labels)


def test_shared_init_is_used_and_sample_order_is_respected():
    # permuting the samples (with their init columns and clients) permutes the labels
    init = F.make_init(X0, K0, 12)
    perm = np.random.default_rng(0).permutation(N0)
    a = F.run_fedcgds(X0, C0, K0, rounds=5, Q1=3, Q2=3, init=init)
    b = F.run_fedcgds(X0[perm], C0[perm], K0, rounds=5, Q1=3, Q2=3, init={"W": init["W"], "H": init["H"][:, perm]})
    np.testing.assert_array_equal(a.labels[perm], b.labels)
    np.testing.assert_allclose(a.centroids, b.centroids, rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(clients_per_round=11), "clients_per_round"),
        (dict(clients_per_round=0), "clients_per_round"),
        (dict(gamma=0.9), "gamma"),
        (dict(step_rule="literal"), "step_rule"),
        (dict(Q1=-1), "Q1"),
        (dict(rounds=0), "rounds"),
        (dict(continuation="yes"), "continuation"),
        (dict(rho_growth=1.0), "rho_growth"),
        (dict(rho_trigger="always"), "rho_trigger"),
        (dict(init=(np.zeros((3, 3)), np.zeros((3, 3)))), "init W"),
        (dict(y=np.zeros(3)), "y must"),
    ],
)
def test_bad_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        F.run_fedcgds(X0, C0, K0, **{"rounds": 2, **kwargs})


def test_fedcavg_bad_options_raise():
    with pytest.raises(ValueError, match="lw"):
        F.run_fedcavg(X0, C0, K0, rounds=1, lw="local")
    with pytest.raises(ValueError, match="q_hat"):
        F.run_fedcavg(X0, C0, K0, rounds=1, q_hat=-2)
    with pytest.raises(ValueError, match="init H"):
        init = F.make_init(X0, K0, 0)
        init["H"][0, 0] = -1
        F.run_fedcavg(X0, C0, K0, rounds=1, init=init)


def test_fedcavg_client_drift_with_global_lw_is_contained():
    """Non-iid clients, Q2 = 200, the paper-style global L_W: local W steps overshoot (client drift),
    the server projection keeps W in the box and the run continues (H may collapse to 0: W phase no-op)."""
    from sklearn.cluster import KMeans

    X, _ = _linear(n=600, m=50, k=5, seed=3)
    client = KMeans(30, n_init=1, random_state=0).fit_predict(X)
    bad = F.run_fedcavg(X, client, 5, rounds=8, Q1=5, Q2=200, lw="global", init=F.make_init(X, 5, 0))
    good = F.run_fedcavg(X, client, 5, rounds=8, Q1=5, Q2=200, lw="clients", init=F.make_init(X, 5, 0))
    assert np.isfinite(bad.history["objective"]).all()
    assert bad.centroids.min() >= X.min() and bad.centroids.max() <= X.max()
    assert bad.history["objective"][-1] > good.history["objective"][-1]
