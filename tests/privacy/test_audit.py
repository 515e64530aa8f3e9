"""The canary auditor itself: its statistics are right, it is tight on a mechanism of known ε, and
it catches a mechanism that spends more than it claims."""

import math

import numpy as np
import pytest

from fedclust.privacy.audit import (
    AuditCase,
    audit_case,
    clopper_pearson,
    epsilon_lower_bound,
    epsilon_lower_bound_from_scores,
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
