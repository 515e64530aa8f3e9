"""The canary auditor itself: its statistics are right, it is tight on a mechanism of known ε, and
it catches a mechanism that spends more than it claims."""

import math

import numpy as np
import pytest

from fedclust.privacy.audit import (
    AuditCase,
    audit_case,
    clopper_pearson,
    distribution_free_ceiling,
    epsilon_lower_bound,
    epsilon_lower_bound_from_scores,
    runs_for_power,
)


def test_clopper_pearson_closed_forms():
    # k = 0: upper bound solves (1 - p)^n = alpha; k = n: lower bound solves p^n = alpha
    lo, hi = clopper_pearson(0, 500, 0.025)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 500), rel=1e-9)
    lo, hi = clopper_pearson(500, 500, 0.025)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 500), rel=1e-9)
    lo, hi = clopper_pearson(50, 100, 0.05)
    assert lo < 0.5 < hi and hi - 0.5 == pytest.approx(0.5 - lo, rel=1e-9)  # symmetric at p = 1/2


def test_bound_from_counts_is_the_log_ratio_of_the_confidence_bounds():
    tp, n_in, fp, n_out, delta = 880, 1000, 120, 1000, 1e-5
    tpr_lo, _ = clopper_pearson(tp, n_in, 0.025)
    _, fpr_hi = clopper_pearson(fp, n_out, 0.025)
    expected = max(math.log((tpr_lo - delta) / fpr_hi), math.log((1 - fpr_hi - delta) / (1 - tpr_lo)))
    assert epsilon_lower_bound(tp, n_in, fp, n_out, delta) == pytest.approx(expected, rel=1e-12)
    assert epsilon_lower_bound(500, 1000, 500, 1000, delta) == 0.0  # no advantage, no bound


def _randomized_response(eps: float):
    """Randomized response on one bit: exactly eps-DP; the canary is the bit."""
    p = math.exp(eps) / (1 + math.exp(eps))

    def scores(with_canary, noise, n, seed):
        rng = np.random.default_rng(seed)
        truth = 1.0 if with_canary else 0.0
        if not noise:
            return np.full(n, truth)
        keep = rng.random(n) < p
        return np.where(keep, truth, 1 - truth)

    return scores


def test_audit_is_tight_on_randomized_response_and_never_exceeds_its_epsilon():
    for eps in (0.5, 2.0):
        case = AuditCase("rr", "rr", _randomized_response(eps), epsilon=eps, delta=0.0, n_runs=40_000)
        rep = audit_case(case)
        assert rep.sound and rep.powerful
        assert eps - 0.2 < rep.noisy.epsilon_lower <= eps  # tight within the statistical error


def test_audit_catches_a_gaussian_mechanism_with_too_little_noise():
    from fedclust.privacy.mechanisms import analytic_sigma

    claimed = 1.0
    sigma_ok = analytic_sigma(claimed, 1e-5)

    def gaussian(sigma):
        def scores(with_canary, noise, n, seed):
            rng = np.random.default_rng(seed)
            return float(with_canary) + (sigma if noise else 0.0) * rng.standard_normal(n)

        return scores

    sound = audit_case(AuditCase("g", "g", gaussian(sigma_ok), claimed, 1e-5, n_runs=4000))
    leaky = audit_case(AuditCase("g", "g", gaussian(sigma_ok / 8), claimed, 1e-5, n_runs=4000))
    assert sound.sound and sound.powerful
    assert not leaky.sound and leaky.noisy.epsilon_lower > 2 * claimed


def test_threshold_is_chosen_on_held_out_runs():
    # the calibration half separates perfectly, the evaluation half not at all: no bound
    s_in = np.r_[np.ones(50), np.zeros(50)]
    s_out = np.r_[np.zeros(50), np.ones(50)]
    r = epsilon_lower_bound_from_scores(s_in, s_out, 1e-5)
    assert r["epsilon_lower"] == 0.0 and r["tpr"] == 0.0


def test_the_distribution_free_ceiling_is_the_bound_of_a_perfect_separation():
    # n runs per side: the threshold is picked on the first halves, the rates measured on the second
    for n in (100, 801):
        h = n - n // 2
        assert distribution_free_ceiling(n, 1e-5) == epsilon_lower_bound(h, h, 0, h, 1e-5)
        scores = epsilon_lower_bound_from_scores(np.ones(n), np.zeros(n), 1e-5)
        assert scores["epsilon_lower"] == pytest.approx(distribution_free_ceiling(n, 1e-5))
    assert distribution_free_ceiling(100, 1e-5) < 2.6 < 4.0 < distribution_free_ceiling(800, 1e-5)


def test_noise_off_runs_grow_until_the_ceiling_clears_the_claim():
    assert runs_for_power(1.0, 1e-5, 0.05, 100, 4000) == 100  # 100 runs already reach 2.57
    n = runs_for_power(4.0, 1e-5, 0.05, 100, 4000)
    assert n == 800 and distribution_free_ceiling(n, 1e-5) > 1.1 * 4.0 >= distribution_free_ceiling(400, 1e-5)
    assert runs_for_power(30.0, 1e-5, 0.05, 100, 4000) == 4000  # capped


def test_the_report_carries_each_bounds_noise_off_power():
    """A Gaussian mechanism of known shift: with the noise off the scores separate perfectly, the
    distribution-free bound reaches its ceiling at the noise-off run count (raised for power), and
    the record says which bounds could have caught a leak."""

    def scores(canary, noise, n, seed):
        rng = np.random.default_rng(seed)
        return (1.0 if canary else 0.0) + (rng.standard_normal(n) if noise else np.zeros(n))

    case = AuditCase("g", "g", scores, epsilon=4.0, delta=1e-5, n_runs=200, gaussian=True, power_runs=100)
    rep = audit_case(case, seed=0)
    power = rep.to_dict()["noise_off_power"]
    assert power["n_runs"] == 800 and rep.noise_off.n_runs == 800
    assert power["distribution_free"] == pytest.approx(power["distribution_free_ceiling"])
    assert power["distribution_free_powerful"] and power["tight_powerful"]
    # a case that caps its noise-off runs keeps the cap, and its bound says it has no power
    capped = audit_case(AuditCase("g", "g", scores, 4.0, 1e-5, n_runs=200, power_runs=100, power_runs_max=100))
    assert capped.noise_off.n_runs == 100 and not capped.noise_off_power["distribution_free_powerful"]
