"""DP-FedC's formulas (spec 000 section 3): eq. (29), its fallback, and Theorem 3 eq. (32)."""

import math

import pytest

from fedclust.privacy.paper import dp_fedc


def test_eq29_factor_hand_value():
    # spec 000 3.5: q = 0.5, delta = 1e-4 -> sqrt(8 ln 6250) = 8.36
    assert dp_fedc.eq29_factor(1.0, 1e-4, 0.5) == pytest.approx(8.36, abs=0.005)
    assert dp_fedc.eq29_factor(2.0, 1e-4, 0.5) == pytest.approx(8.36 / 2, abs=0.003)
    # q = 0.25: sqrt(32 * 0.0625 * ln(3125)) = sqrt(2 * 8.04719) = 4.01178
    assert dp_fedc.eq29_factor(1.0, 1e-4, 0.25) == pytest.approx(4.01178, abs=1e-4)


def test_sigma_round_amplified_within_assumptions():
    # G Q2 / eta = 2 * 5 / 10 = 1; epsilon/(2q) = 0.8 <= 1: no note
    sigma, note = dp_fedc.sigma_round(G=2.0, Q2=5, eta=10.0, epsilon=0.4, delta=1e-4, q=0.25)
    assert note is None
    assert sigma == pytest.approx(4.01178 / 0.4, rel=1e-5)
    # and it equals the sensitivity of eq. (28) times sqrt(2 ln(1.25 q/delta)) * 2q/eps
    s = dp_fedc.sensitivity(2.0, 5, 10.0)
    assert s == pytest.approx(2.0)
    assert sigma == pytest.approx(s * math.sqrt(2 * math.log(1.25 * 0.25 / 1e-4)) * 2 * 0.25 / 0.4)


def test_sigma_round_notes_outside_assumptions():
    sigma, note = dp_fedc.sigma_round(1.0, 1, 1.0, epsilon=1.0, delta=1e-4, q=0.25)
    assert note is not None and "epsilon/(2q)" in note
    # q >= 1/2: un-amplified sigma^2 = 8 G^2 Q2^2 ln(1.25/delta) / (eta^2 eps^2), with a note
    sigma, note = dp_fedc.sigma_round(1.0, 3, 2.0, epsilon=0.5, delta=1e-4, q=0.6)
    assert sigma == pytest.approx(math.sqrt(8 * math.log(12500.0)) * 1.5 / 0.5)
    assert "no amplification" in note
    # paper-literal: eq. (29) even for q >= 1/2, flagged
    sigma, note = dp_fedc.sigma_round(1.0, 1, 1.0, epsilon=1.0, delta=1e-4, q=0.5, fallback=False)
    assert sigma == pytest.approx(8.362, abs=1e-3) and "1/2" in note


def test_sigma_scales_inversely_with_epsilon():
    a, _ = dp_fedc.sigma_round(1.0, 2, 1.0, epsilon=0.2, delta=1e-4, q=0.1)
    b, _ = dp_fedc.sigma_round(1.0, 2, 1.0, epsilon=0.4, delta=1e-4, q=0.1)
    assert a == pytest.approx(2 * b)


@pytest.mark.parametrize(
    "eps_bar,p,q,expected",
    # spec 000 section 3.6 table (c0 = 1, R = 100)
    [
        (2, 0.1, 0.05, 246.6),
        (2, 0.3, 0.10, 34.6),
        (2, 1.0, 0.25, 2.77),
        (2, 0.1, 0.50, 1.79),
        (20, 0.3, 0.50, 10.3),
        (20, 1.0, 0.10, 190.0),
        (20, 1.0, 0.50, 5.66),
    ],
)
def test_round_epsilon_matches_spec_table(eps_bar, p, q, expected):
    eps = dp_fedc.round_epsilon(eps_bar, q, p, 100)
    assert eps == pytest.approx(expected, rel=0.005)
    assert dp_fedc.total_epsilon(eps, q, p, 100) == pytest.approx(eps_bar, rel=1e-12)


def test_round_epsilon_c0_and_q_cap():
    assert dp_fedc.round_epsilon(2, 0.1, 0.3, 100, c0=2.0) == pytest.approx(dp_fedc.round_epsilon(2, 0.1, 0.3, 100) / 2)
    # q = 1 is capped at 0.99 so that 1 - q > 0
    assert dp_fedc.round_epsilon(2, 1.0, 0.3, 100) == pytest.approx(dp_fedc.round_epsilon(2, 0.99, 0.3, 100))
    assert dp_fedc.effective_q(Q2=5, b=50, n_i=100) == 0.99
    assert dp_fedc.effective_q(Q2=1, b=50, n_i=200) == 0.25


def test_release_for_accountant():
    r = dp_fedc.release(sigma=10.0, sens=2.0, rounds=100, n_i=1000, batch=50)
    assert r.noise_multipliers == (5.0,) and r.neighbouring == "replace_one" and r.unit == "sample"
    assert r.sample_size == 50 and r.population == 1000


def test_invalid_inputs_name_parameter():
    with pytest.raises(ValueError, match="epsilon"):
        dp_fedc.sigma_round(1, 1, 1, 0.0, 1e-4, 0.1)
    with pytest.raises(ValueError, match="delta"):
        dp_fedc.sigma_round(1, 1, 1, 1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="q"):
        dp_fedc.sigma_round(1, 1, 1, 1.0, 1e-4, 0.0)
    with pytest.raises(ValueError, match="q"):
        dp_fedc.sigma_round(1, 1, 1, 1.0, 1e-4, 1.5)
    with pytest.raises(ValueError, match="G"):
        dp_fedc.sigma_round(0.0, 1, 1, 1.0, 1e-4, 0.1)
    with pytest.raises(ValueError, match="eps_bar"):
        dp_fedc.round_epsilon(0.0, 0.1, 0.3, 100)
    with pytest.raises(ValueError, match="R"):
        dp_fedc.round_epsilon(2.0, 0.1, 0.3, 0)
    with pytest.raises(ValueError, match="p"):
        dp_fedc.total_epsilon(1.0, 0.1, 0.0, 100)
