"""FedSC's formulas (spec 001 section 3): Proposition 3.7 and Theorem 3.9."""

import pytest

from fedclust.privacy import epsilon
from fedclust.privacy.mechanisms import PrivacyWarning
from fedclust.privacy.paper import fedsc


def test_perturbed_data_sigma_hand_value():
    # 2 * sqrt(2 ln(1.25e5)) * tau_x / eps = 2 * 4.84475 * 1.5 / 0.5
    s = fedsc.perturbed_data_sigma(0.5, 1e-5, tau_x=1.5)
    assert s == pytest.approx(29.0685, abs=1e-3)
    assert fedsc.perturbed_data_epsilon(s, 1e-5, 1.5) == pytest.approx(0.5)
    with pytest.warns(PrivacyWarning):
        fedsc.perturbed_data_sigma(2.0, 1e-5, tau_x=1.0)
    a = fedsc.perturbed_data_sigma(0.5, 1e-5, tau_x=1.5, mechanism="analytic")
    assert a < s


def test_perturbed_data_release_is_conservative():
    # the classical formula (eps < 1) over-provisions: the accountant's epsilon is below the target
    s = fedsc.perturbed_data_sigma(0.5, 1e-5, tau_x=1.0)
    r = fedsc.perturbed_data_release(s, 1.0)
    assert r.noise_multipliers == pytest.approx((s / 2.0,))
    assert epsilon([r], 1e-5, "pld") <= 0.5


def test_sensitivities_hand_values():
    # d=4, tau_c=1, tau_x=1, tau_z=2, upsilon=3, r=2, eta=0.5:
    # (2*2*1*1*0.5/4) * (1 + (1+2)*(1+3)/4) = 0.5 * 4 = 2
    assert fedsc.z_sensitivity(tau_x=1, tau_c=1, tau_z=2, upsilon=3, r=2, d=4, eta=0.5) == pytest.approx(2.0)
    # 2*sqrt(4)*1*(1+3)/(0.5*4) = 16/2 = 8
    assert fedsc.c_sensitivity(tau_x=1, upsilon=3, r=2, d=4, lam=0.5) == pytest.approx(8.0)


def test_factor_sigmas_hand_values_and_inverse():
    # sqrt(8*20*2^2*ln(e + 1e5)/1^2) = sqrt(640 * 11.512953) = 85.8389
    sz = fedsc.factor_sigma_z(1.0, 1e-5, rounds=20, sensitivity_z=2.0)
    assert sz == pytest.approx(85.8389, abs=1e-3)
    assert fedsc.factor_epsilon_z(sz, 1e-5, 20, 2.0) == pytest.approx(1.0, rel=1e-9)
    # sqrt(2 ln(1.25e5)) * 8 / 0.5 = 4.84475 * 16
    sc = fedsc.factor_sigma_c(0.5, 1e-5, sensitivity_c=8.0)
    assert sc == pytest.approx(77.516, abs=1e-3)
    assert fedsc.factor_epsilon_c(sc, 1e-5, 8.0) == pytest.approx(0.5)


def test_perturbed_factors_bundle_and_accountant():
    out = fedsc.perturbed_factors_sigmas(1.0, 1e-5, 0.5, 1e-5, rounds=20, tau_x=1, tau_c=1, tau_z=2,
                                         upsilon=3, r=2, d=4, lam=0.5, eta=0.5)
    assert out["sigma_z"] == pytest.approx(85.8389, abs=1e-3)
    assert out["sigma_c"] == pytest.approx(77.516, abs=1e-3)
    assert out["epsilon"] == 1.5 and out["delta"] == pytest.approx(2e-5)
    rs = fedsc.perturbed_factors_releases(out["sigma_z"], out["sensitivity_z"], 20, out["sigma_c"], out["sensitivity_c"])
    assert [r.count for r in rs] == [20, 1]
    # Kairouz + basic composition is looser than RDP accounting of the same noise
    assert epsilon(rs, 2e-5) < 1.5


def test_invalid_inputs_name_parameter():
    with pytest.raises(ValueError, match="epsilon"):
        fedsc.perturbed_data_sigma(0.0, 1e-5, 1.0)
    with pytest.raises(ValueError, match="delta"):
        fedsc.perturbed_data_sigma(0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="tau_x"):
        fedsc.perturbed_data_sigma(0.5, 1e-5, 0.0)
    with pytest.raises(ValueError, match="rounds"):
        fedsc.factor_sigma_z(1.0, 1e-5, 0, 1.0)
    with pytest.raises(ValueError, match="epsilon_z"):
        fedsc.factor_sigma_z(-1.0, 1e-5, 5, 1.0)
    with pytest.raises(ValueError, match="delta_c"):
        fedsc.factor_sigma_c(0.5, 2.0, 1.0)
    with pytest.raises(ValueError, match="mechanism"):
        fedsc.perturbed_data_sigma(0.5, 1e-5, 1.0, mechanism="laplace")
