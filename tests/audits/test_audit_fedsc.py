"""Canary audits and statistical noise tests of FedSC's private variants (issue 13, point 6).

The audits run :func:`fedclust.clustering.fedsc.run` itself (see :mod:`fedclust.audits.fedsc`);
the noise tests check that what a run releases carries exactly the noise its DP events account for.
"""

import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedclust.audits import fedsc as fedsc_audits
from fedclust.clustering import fedsc
from fedclust.privacy.accountants import epsilon
from fedclust.privacy.audit import audit_case

N_RUNS = 400  # 200 evaluation runs per side: bounds up to ~4, enough above epsilon = 1


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module", params=sorted(fedsc_audits.CASES))
def report(request):
    case = fedsc_audits.CASES[request.param]()
    return audit_case(case, n_runs=N_RUNS, seed=1)


def test_audit_lower_bound_stays_below_accounted_epsilon(report):
    assert 0.9 < report.case.epsilon <= 1.0  # the accountant's epsilon of the audited run, near the budget
    assert report.sound, report.to_dict()


def test_audit_without_noise_finds_more_than_accounted(report):
    assert report.powerful, report.to_dict()
    assert report.noise_off.tpr == 1.0 and report.noise_off.fpr == 0.0


def test_cases_are_registered_for_both_variants():
    from fedclust import audits

    assert "fedsc" in audits.FAMILIES
    assert set(fedsc_audits.CASES) == {"fedsc_data", "fedsc_data_domain", "fedsc_factors"}
    assert fedsc_audits.CASES["fedsc_factors"]().info["variant"] == "factors"


# --------------------------------------------------------------------------- statistical noise tests
def test_perturbed_data_noise_std_equals_accounted_std():
    """Large noise multiplier: the empirical std of (released - clipped) rows equals the event's
    multiplier times the sensitivity 2 tau_X, and the rows were clipped to tau_X before the noise."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(2000, 5))
    client = np.arange(2000) % 4
    tau, z = 1.5, 40.0
    res = fedsc.run(
        X,
        client,
        2,
        seed=3,
        rounds=1,
        d=2,
        r=1.0,
        clip_tau=tau,
        data_noise_std=z * 2 * tau,
        return_uploads=True,
        cluster=False,
    )
    (ev,) = res.dp_events
    up = res.info["uploads"]
    assert np.linalg.norm(up["X_clipped"], axis=1).max() <= tau + 1e-12
    assert np.allclose(up["X_clipped"], fedsc.clip_rows(X, tau))
    claimed = ev.noise_multipliers[0] * 2 * tau
    emp = float((up["X_released"] - up["X_clipped"]).std())
    assert emp == pytest.approx(claimed, rel=0.03)
    assert claimed == pytest.approx(z * 2 * tau)


def test_perturbed_factor_noise_stds_equal_accounted_stds():
    """Large noise (tiny budget): the empirical std of every Z_p upload's noise and of C's noise
    equals the multiplier of its event times the per-sample sensitivity (recomputed here by hand);
    and the calibration spends the budget."""
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, size=(200, 5))
    client = np.arange(200) % 10
    d, r, tau_c, z_lr, rounds, eps = 10, 0.9, 0.8, 0.7, 5, 0.05
    cal = fedsc.factor_noise_stds(eps, 1e-5, rounds=rounds, d=d, r=r, tau_c=tau_c, z_lr=z_lr)
    res = fedsc.run(
        X,
        client,
        2,
        seed=0,
        rounds=rounds,
        d=d,
        r=r,
        lam=1e-2,
        tau_c=tau_c,
        tau_z=50.0,
        z_step="gradient",
        z_lr=z_lr,
        z_noise_std=cal["z_noise_std"],
        c_noise_std=cal["c_noise_std"],
        return_uploads=True,
        cluster=False,
    )
    ez, ec = res.dp_events
    assert ez.count == rounds - 1 and ec.count == 1
    delta_z = 2 * z_lr * tau_c * (1 + math.sqrt(d) * tau_c) * math.exp(-0.5) / r
    up = res.info["uploads"]
    z_noise = np.concatenate([(a - b).ravel() for a, b in zip(up["Z_released"], up["Z_clean"])])
    assert z_noise.size == (rounds - 1) * 10 * d * 5
    assert float(z_noise.std()) == pytest.approx(ez.noise_multipliers[0] * delta_z, rel=0.06)
    c_noise = (up["C_released"] - up["C_clean"]).ravel()
    assert float(c_noise.std()) == pytest.approx(ec.noise_multipliers[0] * 2 * tau_c, rel=0.06)
    assert np.linalg.norm(up["C_clean"], axis=0).max() <= tau_c + 1e-12
    spent = epsilon(res.dp_events, 1e-5)
    assert 0.97 * eps <= spent <= eps * 1.0001


def test_perturbed_data_noise_std_with_a_declared_domain_equals_multiplier_times_sqrt2_tau():
    """With the declared domain [0, 1]^5 the rows are projected onto the box then clipped to tau_X,
    and the event's sensitivity is sqrt(2) tau_X (non-negative rows): the empirical noise std equals
    the event's multiplier times sqrt(2) tau_X, which equals the std passed in."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-0.5, 1.5, size=(2000, 5))  # outside the domain on purpose: projected first
    client = np.arange(2000) % 4
    tau, z = 1.2, 40.0
    res = fedsc.run(
        X,
        client,
        2,
        seed=3,
        rounds=1,
        d=2,
        r=1.0,
        clip_tau=tau,
        data_domain=[0.0, 1.0],
        data_noise_std=z * math.sqrt(2) * tau,
        return_uploads=True,
        cluster=False,
    )
    (ev,) = res.dp_events
    up = res.info["uploads"]
    assert np.allclose(up["X_clipped"], fedsc.clip_rows(np.clip(X, 0.0, 1.0), tau))
    assert up["X_clipped"].min() >= 0.0 and np.linalg.norm(up["X_clipped"], axis=1).max() <= tau + 1e-12
    assert ev.extra["sensitivity"] == pytest.approx(math.sqrt(2) * tau)
    assert ev.noise_multipliers[0] == pytest.approx(z)
    emp = float((up["X_released"] - up["X_clipped"]).std())
    assert emp == pytest.approx(ev.noise_multipliers[0] * math.sqrt(2) * tau, rel=0.03)


def test_data_sensitivity_takes_the_smallest_bound_of_the_declared_domain():
    assert fedsc.data_sensitivity(2.0, 64) == pytest.approx(4.0)  # the paper: 2 tau
    assert fedsc.data_sensitivity(2.0, 64, [0, 1]) == pytest.approx(2.0 * math.sqrt(2))  # orthant
    assert fedsc.data_sensitivity(4.0, 4, [0, 1]) == pytest.approx(2.0)  # box diameter sqrt(m)
    assert fedsc.data_sensitivity(2.0, 64, [-1, 1]) == pytest.approx(4.0)  # neither helps
    assert fedsc.data_sensitivity(2.0, 64, [0.5, 1]) == pytest.approx(2.0 * math.sqrt(2))
    with pytest.raises(ValueError, match="data_domain"):
        fedsc.data_sensitivity(1.0, 3, [1, 0])
