"""RR-Cluster's accounting (spec 002 section 3): Prop. 4.1, Theorem 4.2 (WBK19), reference sigma table."""

import math

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import (
    _compute_rdp_poisson_subsampled_gaussian,
    _compute_rdp_sample_wor_gaussian,
)

from fedclust.privacy import GaussianRelease
from fedclust.privacy import epsilon as acct_epsilon
from fedclust.privacy.paper import rr_cluster

# spec 002 section 3.4 (autodp 0.2.3.1; sigma_s = sigma_theta = sigma; q = 0.1; delta = 1e-3):
# T, eps, sigma (Thm-9 general, +min), sigma (Thm-27 improved), sigma (Poisson RDP, add/remove)
REFERENCE = [
    (50, 0.5, 75.7, 15.75, 7.95),
    (50, 2, 8.54, 4.26, 2.47),
    (50, 4, 2.56, 2.44, 1.58),
    (50, 8, 1.42, 1.42, 1.14),
    (50, 16, 0.93, 0.93, 0.81),
    (100, 0.5, 107.0, 22.16, 10.97),
    (100, 2, 28.06, 5.89, 3.17),
    (100, 4, 3.64, 3.24, 1.92),
    (100, 8, 1.93, 1.93, 1.30),
    (100, 16, 1.13, 1.13, 0.92),
    (200, 2, 39.69, 8.20, 4.23),
    (200, 4, 5.60, 4.41, 2.44),
    (200, 8, 2.59, 2.54, 1.55),
    (200, 16, 1.54, 1.54, 1.08),
]


@pytest.mark.parametrize("T,eps,ref", [(r[0], r[1], r[2]) for r in REFERENCE])
def test_reference_table_general_bound(T, eps, ref):
    s_s, s_t = rr_cluster.calibrate_sigmas(eps, 1e-3, 0.1, T, rho_s=0.5, rtol=2e-3)
    assert s_s == pytest.approx(s_t)
    assert s_t == pytest.approx(ref, rel=0.02)


@pytest.mark.parametrize("T,eps,ref_imp,ref_poi", [(r[0], r[1], r[3], r[4]) for r in REFERENCE])
def test_reference_table_other_bounds(T, eps, ref_imp, ref_poi):
    _, s_imp = rr_cluster.calibrate_sigmas(eps, 1e-3, 0.1, T, bound="wang_improved", rtol=5e-3)
    _, s_poi = rr_cluster.calibrate_sigmas(eps, 1e-3, 0.1, T, bound="poisson_rdp", rtol=5e-3)
    assert s_imp == pytest.approx(ref_imp, rel=0.02)
    assert s_poi == pytest.approx(ref_poi, rel=0.02)


def test_round_rdp_prop_4_1():
    assert rr_cluster.round_rdp(4, 2.0, 1.0) == pytest.approx(4 / 8 + 4 / 2)
    assert rr_cluster.effective_sigma(2.0, 2.0) == pytest.approx(math.sqrt(2.0))
    assert rr_cluster.effective_sigma(None, 3.0) == 3.0  # no identifier


def test_general_bound_order_two_by_hand():
    q, s = 0.1, 1.5
    r2 = 1 / s**2
    by_hand = math.log(1 + q * q * min(4 * (math.exp(r2) - 1), 2 * math.exp(r2)))
    assert rr_cluster.subsampled_rdp(2, q, s, take_min=False) == pytest.approx(by_hand, rel=1e-12)
    # order 3 by hand: 1 + 3 q^2 min(...) + 2 q^3 e^{2 r(3)}, r(3) = 3/(2 s^2)
    by_hand3 = (
        math.log(
            1 + 3 * q * q * min(4 * (math.exp(r2) - 1), 2 * math.exp(r2)) + 2 * q**3 * math.exp(2 * 3 / (2 * s * s))
        )
        / 2
    )
    assert rr_cluster.subsampled_rdp(3, q, s, take_min=False) == pytest.approx(by_hand3, rel=1e-12)


def test_min_with_unsampled_rdp_and_floor():
    # large sigma: the general bound has a floor; the min with r(alpha) removes it (spec 3.3)
    o = np.arange(2, 40)
    raw = rr_cluster.subsampled_rdp(o, 0.1, 1e4, take_min=False)
    mn = rr_cluster.subsampled_rdp(o, 0.1, 1e4)
    assert np.all(mn <= raw) and np.allclose(mn, o / (2 * 1e8))
    # spec's floor values (q=0.1, delta=1e-3, sigma -> inf): T=20: 1.31, 50: 1.77, 100: 2.23, 200: 2.77
    for T, floor in [(20, 1.31), (50, 1.77), (100, 2.23), (200, 2.77)]:
        assert rr_cluster.epsilon(0.1, T, None, 1e6, take_min=False) == pytest.approx(floor, rel=0.01)
        # with the min, only the orders' range limits epsilon: log(1/delta)/(max order - 1)
        assert rr_cluster.epsilon(0.1, T, None, 1e6) < 0.02


def test_other_bounds_match_dp_accounting():
    o = np.array([2, 3, 7, 20, 64, 200])
    for s in (0.8, 2.0, 10.0):
        imp = rr_cluster.subsampled_rdp(o, 0.1, s, bound="wang_improved", take_min=False)
        np.testing.assert_allclose(imp, _compute_rdp_sample_wor_gaussian(0.1, s, o), rtol=2e-3)
        poi = rr_cluster.subsampled_rdp(o, 0.1, s, bound="poisson_rdp")
        np.testing.assert_allclose(poi, _compute_rdp_poisson_subsampled_gaussian(0.1, s, o), rtol=1e-9)
    # improved <= general
    assert np.all(
        rr_cluster.subsampled_rdp(o, 0.1, 2.0, bound="wang_improved") <= rr_cluster.subsampled_rdp(o, 0.1, 2.0) + 1e-15
    )


def test_calibrate_sigmas_split_and_round_trip():
    s_s, s_t = rr_cluster.calibrate_sigmas(4.0, 1e-3, 0.1, 100, rho_s=0.8)
    s_eff = rr_cluster.effective_sigma(s_s, s_t)
    assert 1 / s_s**2 == pytest.approx(0.8 / s_eff**2) and 1 / s_t**2 == pytest.approx(0.2 / s_eff**2)
    eps = rr_cluster.epsilon(0.1, 100, s_s, s_t, 1e-3)
    assert eps <= 4.0 and eps == pytest.approx(4.0, rel=0.01)
    # no identifier (DP-FedAvg): all the budget on the model noise
    s_s0, s_t0 = rr_cluster.calibrate_sigmas(4.0, 1e-3, 0.1, 100, rho_s=0.0)
    assert math.isinf(s_s0) and s_t0 == pytest.approx(s_eff, rel=1e-3)
    # M fixes q to round(qM)/M
    a = rr_cluster.calibrate_sigmas(4.0, 1e-3, 0.1004, 100, M=1000)
    b = rr_cluster.calibrate_sigmas(4.0, 1e-3, 0.1, 100)
    assert a == pytest.approx(b)


def test_release_goes_through_the_generic_accountant():
    r = rr_cluster.release(3.0, 3.0, T=100, M=1000, q=0.1)
    # amendment A-2: fixed-size sampling is a replace-one analysis (the paper's own WBK19 bound)
    assert r.unit == "client" and r.neighbouring == "replace_one" and r.sample_size == 100
    acct = acct_epsilon([r], 1e-3)
    wor = GaussianRelease(
        (3.0 / math.sqrt(2.0),),
        count=100,
        sampling="without_replacement",
        population=1000,
        sample_size=100,
        neighbouring="replace_one",
    )
    assert acct == pytest.approx(acct_epsilon([wor], 1e-3), rel=1e-12)
    # the accountant (WBK19 Thm 27, tighter RDP->DP conversion) is below the paper's Thm 4.2 + eq. (9)
    assert (
        acct
        < rr_cluster.epsilon(0.1, 100, 3.0, 3.0, 1e-3, bound="wang_improved")
        <= rr_cluster.epsilon(0.1, 100, 3.0, 3.0)
    )
    # and above the (invalid here) Poisson add/remove figure
    assert acct > acct_epsilon(
        [GaussianRelease((3.0 / math.sqrt(2.0),), count=100, sampling="poisson", sampling_rate=0.1)], 1e-3
    )


def test_invalid_inputs_name_parameter():
    with pytest.raises(ValueError, match="target_epsilon"):
        rr_cluster.calibrate_sigmas(0.0, 1e-3, 0.1, 10)
    with pytest.raises(ValueError, match="delta"):
        rr_cluster.calibrate_sigmas(1.0, 0.0, 0.1, 10)
    with pytest.raises(ValueError, match="q"):
        rr_cluster.calibrate_sigmas(1.0, 1e-3, 0.0, 10)
    with pytest.raises(ValueError, match="q"):
        rr_cluster.calibrate_sigmas(1.0, 1e-3, 1.2, 10)
    with pytest.raises(ValueError, match="T"):
        rr_cluster.calibrate_sigmas(1.0, 1e-3, 0.1, 0)
    with pytest.raises(ValueError, match="rho_s"):
        rr_cluster.calibrate_sigmas(1.0, 1e-3, 0.1, 10, rho_s=1.0)
    with pytest.raises(ValueError, match="bound"):
        rr_cluster.calibrate_sigmas(1.0, 1e-3, 0.1, 10, bound="autodp")
    with pytest.raises(ValueError, match="T"):
        rr_cluster.epsilon(0.1, 0, 1.0, 1.0)
