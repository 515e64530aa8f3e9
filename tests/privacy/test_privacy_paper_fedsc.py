"""FedSC's formulas (spec 001 section 3): Proposition 3.7 and Theorem 3.9."""

import numpy as np
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
    bounds = fedsc.FactorBounds(tau_x=1, tau_c=1, tau_z=2, upsilon=3, r=2, d=4, lam=0.5, eta=0.5)
    out = fedsc.perturbed_factors_sigmas(1.0, 1e-5, 0.5, 1e-5, rounds=20, bounds=bounds)
    assert out["sigma_z"] == pytest.approx(85.8389, abs=1e-3)
    assert out["sigma_c"] == pytest.approx(77.516, abs=1e-3)
    assert out["epsilon"] == 1.5 and out["delta"] == pytest.approx(2e-5)
    rs = fedsc.perturbed_factors_releases(
        out["sigma_z"], out["sensitivity_z"], 20, out["sigma_c"], out["sensitivity_c"]
    )
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


# --------------------------------------------------------------------------- pipeline calibration (issue 13, point 6)
def _dataset(seed, n=120, m=4):
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    return SimpleNamespace(X=rng.uniform(0, 1, size=(n, m)) ** (1 + seed), y=np.arange(n) % 3, n_classes=3)


_TRAIN = {
    "rounds": 6,
    "lam": 1e-2,
    "n_init": 2,
    "privacy_variant": "factors",
    "clip_tau": 2.0,
    "tau_c": 1.0,
    "z_lr": 0.5,
    "tau_z": 3.0,
}


def test_factor_calibration_reads_no_data():
    """With public kernel constants (default) r, d and the noise stds do not depend on the data (the
    old node computed r and d from the raw data and put them into the sensitivities)."""
    from fedclust.clustering import fedsc as lib
    from fedclust.pipelines.methods import node_functions

    calibrate, _ = node_functions("fedsc")

    privacy = {"epsilon": 1.0, "delta": 1e-5}
    a = calibrate(privacy, dict(_TRAIN), _dataset(0), None)
    b = calibrate(privacy, dict(_TRAIN), _dataset(1), None)
    for key in ("r", "d", "z_noise_std", "c_noise_std"):
        assert a[key] == b[key], key
    assert a["r"] == pytest.approx(lib.public_kernel_width(4, 2.0)) and a["d"] == lib.public_dictionary_size(4, 3)


def test_factor_pipeline_run_meets_budget_and_literal_rules_are_not_private():
    from types import SimpleNamespace

    from fedclust.pipelines.methods import node_functions

    calibrate, train = node_functions("fedsc")
    from fedclust.pipelines.privacy.nodes import report_privacy

    ds = _dataset(0)
    part = SimpleNamespace(client=np.arange(120) % 6)
    privacy = {"epsilon": 1.0, "delta": 1e-5}
    for constants, private in (("public", True), ("data", False)):
        tr = dict(_TRAIN, kernel_constants=constants)
        noise = calibrate(privacy, tr, ds, part)
        res = train(ds, part, noise, tr, 0)
        rep = report_privacy(res, noise, privacy, "fedsc")
        assert rep["private"] is private
        if private:
            assert 0.95 <= rep["epsilon"] <= 1.0001  # the accountant's epsilon meets the budget
            assert any("outside the guarantee" in n for n in rep["notes"])
        else:
            assert rep["epsilon"] == "inf" and any("kernel_constants=data" in n for n in rep["notes"])


def test_factor_paper_calibration_is_reported_by_the_accountant():
    """factor_calibration=paper keeps Theorem 3.9's stds (faithful variant); the report's epsilon is
    still the accountant's on the per-sample sensitivities, next to the paper's claim."""
    from fedclust.pipelines.methods import node_functions

    calibrate, _ = node_functions("fedsc")

    tr = dict(_TRAIN, factor_calibration="paper")
    noise = calibrate({"epsilon": 0.5, "delta": 1e-5}, tr, _dataset(0), None)
    assert noise["paper_epsilon"] == pytest.approx(0.5)
    sens_paper = fedsc.z_sensitivity(tau_x=2.0, tau_c=1.0, tau_z=3.0, upsilon=5.0, r=noise["r"], d=noise["d"], eta=0.5)
    assert noise["z_noise_std"] == pytest.approx(fedsc.factor_sigma_z(0.25, 0.5e-5, 5, sens_paper))
    with pytest.raises(ValueError, match="tau_z"):
        calibrate(
            {"epsilon": 0.5, "delta": 1e-5}, dict(_TRAIN, factor_calibration="paper", tau_z=None), _dataset(0), None
        )
    with pytest.raises(ValueError, match="kernel_constants"):
        calibrate({"epsilon": 0.5, "delta": 1e-5}, dict(_TRAIN, kernel_constants="raw"), _dataset(0), None)


def test_data_variant_calibration_meets_the_budget():
    """mechanism=accountant (the pipeline default): one Gaussian release whose accounted epsilon meets
    the target. Its sensitivity is the smallest bound of the declared domain [0, 1]^4 (the box's
    diameter sqrt(4) = 2 here, below sqrt(2) tau_X and 2 tau_X) and the paper's 2 tau_X with
    data_sensitivity=paper; Prop. 3.7's own claim for that sigma and sensitivity is reported beside it."""
    from types import SimpleNamespace

    from fedclust.pipelines.methods import node_functions

    calibrate, train = node_functions("fedsc")
    from fedclust.pipelines.privacy.nodes import report_privacy

    ds = _dataset(0)
    part = SimpleNamespace(client=np.arange(120) % 6)
    tr = {"rounds": 3, "n_init": 2, "privacy_variant": "data", "clip_tau": 2.0, "mechanism": "accountant"}
    for eps, rule, sens in ((1.0, "domain", 2.0), (8.0, "domain", 2.0), (1.0, "paper", 4.0)):
        t = dict(tr, data_sensitivity=rule)
        noise = calibrate({"epsilon": eps, "delta": 1e-5}, t, ds, part)
        assert noise["data_sensitivity"] == pytest.approx(sens)
        assert noise["data_domain"] == ([0.0, 1.0] if rule == "domain" else None)
        rep = report_privacy(train(ds, part, noise, t, 0), noise, {"epsilon": eps, "delta": 1e-5}, "fedsc")
        assert 0.97 * eps <= rep["epsilon"] <= eps * 1.0001
        assert rep["epsilon_paper"] == pytest.approx(
            fedsc.perturbed_data_epsilon(noise["data_noise_std"], 1e-5, sens / 2.0)
        )
    with pytest.raises(ValueError, match="mechanism"):
        calibrate({"epsilon": 1.0, "delta": 1e-5}, dict(tr, mechanism="laplace"), ds, part)
