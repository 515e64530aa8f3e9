"""DP-FedC's canary audit (sound and powerful) and a statistical test of the noise it releases."""

import math

import numpy as np
import pytest

from fedclust.audits import get
from fedclust.clustering import dp_fedc as D
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.privacy.audit import audit_case
from fedclust.privacy.paper import dp_fedc as paper


@pytest.fixture(scope="module")
def report():
    case = get("dp_fedc")  # epsilon = 1 accounted, delta = 1e-5
    return audit_case(case, n_runs=400, seed=0)


def test_audit_case_accounts_the_releases_of_the_audited_run(report):
    case = report.case
    assert case.method == "dp_fedc"
    assert case.epsilon == pytest.approx(1.0, abs=0.01) and case.epsilon <= 1.0
    # the canary moves client 0's upload by the whole sensitivity 2 G Q2 / eta of eq. (28): its
    # gradients with and without it are exact opposites, each clipped to G (a canary that moved it
    # less, as the digit rows did at 0.6, makes the audit loose)
    assert case.info["shift_over_sensitivity"] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("name", ["dp_fedc", "dp_fedc_secure_aggregation"])
def test_the_audit_is_tight_at_epsilon_4(name):
    """A full-sensitivity canary scored on what the server sees (client 0's upload under local trust,
    the mean under secure aggregation) puts the Gaussian lower bound within 0.8 of the accounted
    epsilon at epsilon = 4 (1,000 runs per side, alpha = 0.05; measured 0.84): the claimed noise is
    the noise there is. The old canary's 0.6 of the sensitivity gave 0.37."""
    rep = audit_case(get(name, epsilon=4.0), seed=0)
    assert rep.sound and rep.powerful
    assert rep.tightness >= 0.8, rep.tightness


def test_audit_lower_bound_stays_below_the_accounted_epsilon(report):
    assert report.sound, (report.noisy.epsilon_lower, report.case.epsilon)


def test_audit_with_the_noise_off_exceeds_the_accounted_epsilon(report):
    assert report.powerful, (report.noise_off.epsilon_lower, report.case.epsilon)
    assert report.noise_off.tpr == 1.0 and report.noise_off.fpr == 0.0


def _noise_of_mean(eps_bar, seeds, **over):
    """(noise in the server's mean, the run) for one round: the private output minus the noise-off
    output of the same public mechanism and seed (they share every draw but the noise)."""
    rng = np.random.default_rng(0)
    X = rng.random((60, 16))
    client = np.repeat(np.arange(3), [12, 20, 28])
    kw = dict(
        rounds=1, clients_per_round=3, q2=2, b=8, G=0.5, clip=2.0, init="uniform_box", constants="public", delta=1e-5
    )
    kw.update(over)
    out, res = [], None
    for s in seeds:
        res = D.run(X, client, 4, seed=s, eps_bar=eps_bar, **kw)
        off = D.run(X, client, 4, seed=s, eps_bar=None, **kw)
        out.append(res.centroids - off.centroids)
    return np.stack(out), res, np.bincount(client)


def test_released_noise_std_equals_the_accounted_std():
    """With a large noise multiplier the empirical std of the noise in the released mean equals
    sqrt(sum_i sigma_i^2) / K with sigma_i = z * 2 G Q2 / eta_i: z from the accountant's releases,
    eta_i = alpha_2 n_i / k public (a missing 1/K, a data-dependent eta or a wrong G would fail)."""
    xi, res, sizes = _noise_of_mean(0.05, range(20))
    (ev,) = res.dp_events  # the worst client's releases: one per round, one round here
    z = ev.noise_multipliers[0]
    eps_round = res.info["eps_round"]
    G, Q2, K, k = 0.5, 2, 3, 4
    eta = D.ALPHA_2["public"] * sizes / k  # alpha_2 n_i / k: the public stand-in for lambda_max(H_i H_i')
    assert D.ALPHA_2["public"] == 1.25
    # every client's sigma by the paper's formula (its own q_i), and the worst client's is the release's
    sig = np.array(
        [paper.sigma_round(G, Q2, e, eps_round, 1e-5, min(Q2 * min(8, n) / n, 0.99))[0] for e, n in zip(eta, sizes)]
    )
    n_w = res.info["dp_event_n_i"]
    assert z == pytest.approx(sig[list(sizes).index(n_w)] / (2 * G * Q2 / eta[list(sizes).index(n_w)]), rel=1e-9)
    np.testing.assert_allclose(res.info["round_sigma"][0], sig, rtol=1e-9)
    claimed = math.sqrt(np.sum(sig**2)) / K
    assert xi.std() == pytest.approx(claimed, rel=0.06)  # 20 runs x 4 x 16 entries: 2 % standard error
    assert abs(xi.mean()) < 4 * claimed / math.sqrt(xi.size)


def test_noise_std_is_public_when_a_private_sample_is_scaled_up():
    """The noise and the accounted epsilon must not depend on private data: scaling one sample by
    100 changes neither sigma, eta, rho nor mu_h (old code: eta from lambda_max(H_i H_i') and rho from
    ||X||_F^2, both moved by the sample)."""
    rng = np.random.default_rng(1)
    X = rng.random((60, 16))
    client = np.repeat(np.arange(3), 20)
    Y = X.copy()
    Y[5] *= 100.0
    kw = dict(rounds=3, clients_per_round=2, seed=0, eps_bar=20.0, G=0.5)
    a, b = D.run(X, client, 4, **kw), D.run(Y, client, 4, **kw)
    assert a.history["sigma"] == b.history["sigma"] and a.history["eta"] == b.history["eta"]
    assert (a.info["rho"], a.info["mu_h"]) == (b.info["rho"], b.info["mu_h"])
    assert accounted(a.dp_events, 1e-4) == accounted(b.dp_events, 1e-4) < math.inf


def test_paper_literal_constants_leak_more_than_their_gaussian_claims():
    """Why constants="data" is reported as epsilon = inf: with eta from lambda_max(H_i H_i') and no sample
    clip, a canary scaled up shrinks its client's noise; the audit then finds far more than the epsilon
    the Gaussian releases would claim (about 1 here)."""
    from fedclust.audits import dp_fedc as A
    from fedclust.privacy.audit import AuditCase, seeded_scores

    d = A.audit_data()
    sched = dict(rounds=1, clients_per_round=2, q2="diminishing", Qhat=10, b=50)
    eb = D.eps_bar_for_budget(1.0, 1e-5, np.bincount(d["client"]), **sched)
    kw = dict(
        sched,
        G=0.03,
        delta=1e-5,
        clip=1e9,
        constants="data",
        init_centroids=d["W0"],
        h_init="nearest",
        blas_threads=None,
    )
    X0, client = A.neighbours(False)
    X1 = X0.copy()
    X1[d["slot"]] = d["canary"] * 100.0

    def run(X, s, noise=True):
        return D.run(X, client, 2, seed=s, eps_bar=eb if noise else None, **kw)

    probe = run(X1, 0)
    assert accounted(probe.dp_events, 1e-5) == math.inf  # the run itself says it is not DP
    claimed = accounted([e for e in probe.dp_events if e.is_private], 1e-5)
    B = run(X1, 0, noise=False).centroids

    def scores(canary, noise, n, seed):  # closeness to the canary's noise-free output
        X = X1 if canary else X0
        return seeded_scores(lambda s: -float(np.square(run(X, s).centroids - B).sum()), n, seed)

    rep = audit_case(AuditCase("literal", "dp_fedc", scores, claimed, 1e-5, n_runs=200), power_check=False)
    assert claimed == pytest.approx(1.0, abs=0.01)
    assert rep.noisy.epsilon_lower > 2.0 * claimed


@pytest.fixture(scope="module")
def report_sa():
    case = get("dp_fedc_secure_aggregation")  # epsilon = 1 accounted, delta = 1e-5
    return audit_case(case, n_runs=400, seed=0)


def test_secure_aggregation_audit_is_sound_powerful_and_sees_one_draw_on_the_sum(report_sa):
    case = report_sa.case
    assert case.info["trust_model"] == "secure_aggregation"
    assert case.epsilon == pytest.approx(1.0, abs=0.01) and case.epsilon <= 1.0
    assert 0.3 < case.info["shift_over_sensitivity"] <= 1.0
    assert report_sa.sound, (report_sa.noisy.epsilon_lower, case.epsilon)
    assert report_sa.powerful and report_sa.noise_off.tpr == 1.0 and report_sa.noise_off.fpr == 0.0
    # one draw of client 0's std (the larger) on the sum: the mean carries sigma_0 / K, less than the
    # local model's sqrt(sigma_0^2 + sigma_1^2) / K, and the measured noise agrees with it
    local = get("dp_fedc")
    assert case.noise_std == pytest.approx(case.info["sigma"] / 2, rel=1e-12)
    assert case.noise_std < local.noise_std
    assert 0.8 < report_sa.noisy.noise_measured["ratio"] < 1.25


def test_secure_aggregation_noise_std_equals_the_largest_client_sigma_over_K():
    """Under secure aggregation the released mean's noise has std max_i sigma_i / K per entry, with
    sigma_i the paper's per-client std (eq. 29 with the public eta_i = alpha_2 n_i / k), and the run
    reports the same accounted releases as the local model (each client's multiplier is at least its
    calibrated one)."""
    xi, res, sizes = _noise_of_mean(0.05, range(20), trust_model="secure_aggregation")
    _, res_local, _ = _noise_of_mean(0.05, range(1))
    eps_round = res.info["eps_round"]
    G, Q2, K, k = 0.5, 2, 3, 4
    eta = D.ALPHA_2["public"] * sizes / k
    sig = np.array(
        [paper.sigma_round(G, Q2, e, eps_round, 1e-5, min(Q2 * min(8, n) / n, 0.99))[0] for e, n in zip(eta, sizes)]
    )
    np.testing.assert_allclose(res.info["round_sigma"][0], sig, rtol=1e-9)
    assert res.info["round_sigma_sum"][0] == pytest.approx(sig.max(), rel=1e-12)
    assert res.info["trust_model"] == "secure_aggregation"
    claimed = sig.max() / K
    assert xi.std() == pytest.approx(claimed, rel=0.06)  # 20 runs x 4 x 16 entries: 2 % standard error
    assert abs(xi.mean()) < 4 * claimed / math.sqrt(xi.size)
    assert claimed < math.sqrt(np.sum(sig**2)) / K  # less noise than the local model's mean
    assert accounted(res.dp_events, 1e-5) == pytest.approx(accounted(res_local.dp_events, 1e-5), rel=1e-12)
