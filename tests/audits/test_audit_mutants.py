"""Every DP method has an audit case and a halved-noise mutant that the audit catches; the tight
(Gaussian-DP) audit is right on a mechanism of known noise and never above it.

The cases and mutant tests are generated from the method registry and the audit registry, so a DP
method without an audit case or without a mutant switch fails here."""

import inspect
import math

import numpy as np
import pytest

from fedclust.audits import cases
from fedclust.privacy.accountants import calibrate_noise_multiplier
from fedclust.privacy.audit import AuditCase, audit_case, gaussian_audit, gaussian_dp_epsilon
from fedclust.registry.spec import REGISTRY

PRIVATE = sorted(name for name, spec in REGISTRY.items() if spec.private)
CASES = cases()


def _cases_of(method: str) -> list[str]:
    return [c for c in CASES if c == method or c.startswith(method + "_")]


@pytest.mark.parametrize("method", PRIVATE)
def test_every_private_method_has_an_audit_case(method):
    assert _cases_of(method), f"DP method {method!r} has no audit case in fedclust.audits"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_audit_case_has_a_mutant_switch_that_is_off_by_default(name):
    p = inspect.signature(CASES[name]).parameters
    assert "noise_scale" in p and p["noise_scale"].default == 1.0


def test_users_cannot_reach_the_mutant_switch():
    from fedclust.grids.privacy_audit import check_config

    with pytest.raises(ValueError, match="noise_scale"):
        check_config({"cases": {"fkm": {"noise_scale": 0.5}}})


# The fast mutant check, generated from the audit registry: every case with half its calibrated noise,
# at the smaller default budget, 100 runs per side. The measured-noise audit reads the std of the
# case's noise residual (about half the claimed one) and reports the accountant's epsilon at that
# noise, about twice the claim; the unmutated case stays sound at the same run count.
FAST_RUNS = 100


@pytest.mark.parametrize("name", sorted(CASES))
def test_halved_noise_mutant_is_caught(name):
    case = CASES[name](epsilon=1.0)
    mutant = CASES[name](epsilon=1.0, noise_scale=0.5)
    assert mutant.epsilon == pytest.approx(case.epsilon)  # the mutant keeps the claim
    assert case.noise_std and case.epsilon_at_noise is not None, f"{name}: no measured-noise audit"
    rep = audit_case(case, n_runs=FAST_RUNS, seed=5, power_check=False, mutant=mutant)
    assert rep.sound, rep.to_dict()
    assert 0.8 < rep.noisy.noise_measured["ratio"] < 1.25  # the code adds the noise it claims
    assert 0.4 < rep.mutant.noise_measured["ratio"] < 0.625  # ... and the mutant half of it
    assert rep.mutant_caught, rep.to_dict()["mutant"]
    d = rep.to_dict()
    assert d["mutant"]["caught"] is True and d["mutant"]["epsilon_audited"] > d["epsilon_accounted"]
    assert d["mutant"]["epsilon_audited_noise"] > 1.3 * d["epsilon_accounted"]


# ---- the tight audit itself ------------------------------------------------------------------------
def _gauss_case(sigma_claimed, sigma_used, eps_claim, delta=1e-5):
    """Score = 1{canary} + N(0, sigma_used^2), a Gaussian mechanism whose claim is sigma_claimed."""

    def scores(with_canary, noise, n, seed):
        rng = np.random.default_rng(seed)
        return float(with_canary) + (sigma_used if noise else 0.0) * rng.standard_normal(n)

    return AuditCase("g", "g", scores, eps_claim, delta, gaussian=True)


def test_gaussian_dp_epsilon_matches_the_pld_accountant():
    from fedclust.privacy import GaussianRelease
    from fedclust.privacy.accountants import epsilon

    for eps in (1.0, 4.0):
        z = calibrate_noise_multiplier(eps, 1e-5, steps=1, accountant="pld")
        assert gaussian_dp_epsilon(1 / z, 1e-5) == pytest.approx(epsilon(GaussianRelease((z,)), 1e-5, "pld"), abs=2e-3)
    assert gaussian_dp_epsilon(0.0, 1e-5) == 0.0 and gaussian_dp_epsilon(1e-6, 1e-5) == 0.0


def test_tight_audit_is_tight_and_never_above_the_claim_and_catches_half_the_noise():
    eps = 4.0
    z = calibrate_noise_multiplier(eps, 1e-5, steps=1, accountant="pld")
    ok = audit_case(_gauss_case(z, z, eps), n_runs=4000, seed=2, power_check=False, mutant=_gauss_case(z, z / 2, eps))
    assert ok.sound and ok.noisy.epsilon_tight <= eps
    assert ok.tightness > 0.85  # 4000 runs: mu within a few percent
    assert ok.mutant_caught and ok.mutant.epsilon_tight > 1.5 * eps
    # the distribution-free bound cannot see the same mutant at this run count
    assert ok.mutant.epsilon_lower < eps


def test_measured_noise_audit_is_conservative_and_sees_half_the_noise():
    from fedclust.privacy import GaussianRelease
    from fedclust.privacy.audit import epsilon_with_noise, noise_audit

    rel = GaussianRelease((calibrate_noise_multiplier(1.0, 1e-5, steps=1),))
    assert epsilon_with_noise(rel, 1e-5, 1.0) == pytest.approx(1.0, abs=2e-3)
    assert epsilon_with_noise(rel, 1e-5, 0.5) > 2.0 and epsilon_with_noise(rel, 1e-5, 2.0) < 0.5
    rng = np.random.default_rng(3)
    # the upper end stays above the true std in at least ~1 - alpha of the seeds (means per side unknown)
    misses = sum(
        noise_audit(5.0 + 2.0 * rng.standard_normal((50, 3)), 2.0 * rng.standard_normal((50, 3)), 2.0)["ratio_upper"]
        < 1.0
        for _ in range(300)
    )
    assert misses <= 27
    half = noise_audit(rng.standard_normal(200), rng.standard_normal(200), 2.0)
    assert half["ratio_upper"] < 0.6 and epsilon_with_noise(rel, 1e-5, half["ratio_upper"]) > 1.5


def test_gaussian_audit_interval_is_conservative():
    # over many seeds the lower end stays below the true mu (1/sigma) in at least ~1 - alpha of them
    rng = np.random.default_rng(0)
    sigma, misses = 2.0, 0
    for _ in range(200):
        a = 1.0 + sigma * rng.standard_normal(200)
        b = sigma * rng.standard_normal(200)
        misses += gaussian_audit(a, b, 1e-5)["mu_lower"] > 1 / sigma
    assert misses <= 20
    r = gaussian_audit(np.full(10, 1.0) + 1e-9 * np.arange(10), np.zeros(10) + 1e-9 * np.arange(10), 1e-5)
    assert math.isinf(r["mu_lower"]) or r["mu_lower"] > 1e6  # noise-free: unbounded


def test_noise_off_gaussian_statistic_gives_the_tight_audit_its_power():
    # with the noise off the statistic takes two values: the tight bound is unbounded, so a claim of
    # any size is exceeded (the distribution-free bound is capped by the run count, ~ln(n/3.7); an
    # explicit power_runs keeps it at 200)
    rep = audit_case(_gauss_case(1.0, 1.0, 6.0), n_runs=200, power_runs=200, seed=1)
    assert math.isinf(rep.noise_off.epsilon_tight) and rep.noise_off.epsilon_lower < 6.0
    assert rep.powerful
