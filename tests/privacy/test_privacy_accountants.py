"""Accountants on dp-accounting: epsilon, calibration (pinned to direct dp-accounting calls)."""

import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

from fedclust.privacy import GaussianRelease
from fedclust.privacy.accountants import (
    RDP_ORDERS,
    accounting_notes,
    calibrate_noise_multiplier,
    effective_noise_multiplier,
    epsilon,
    split_noise_multipliers,
)

NR = dpa.NeighboringRelation


def _direct_rdp(event, relation=NR.ADD_OR_REMOVE_ONE, delta=1e-5):
    acc = RdpAccountant(orders=DEFAULT_RDP_ORDERS, neighboring_relation=relation)
    acc.compose(event)
    return acc.get_epsilon(delta)


def test_our_rdp_orders_are_dp_accountings_defaults():
    # written out so that importing the accountants does not load dp-accounting; the same floats
    assert RDP_ORDERS == tuple(float(o) for o in DEFAULT_RDP_ORDERS)


def test_epsilon_matches_dp_accounting_abadi_setting():
    # DP-SGD-like setting (Abadi et al. 2016 style): q = 0.01, z = 1.1, 1000 steps, delta = 1e-5
    r = GaussianRelease((1.1,), count=1000, sampling="poisson", sampling_rate=0.01)
    direct = _direct_rdp(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1)), 1000))
    assert epsilon([r], 1e-5, orders=DEFAULT_RDP_ORDERS) == pytest.approx(direct, rel=1e-10)
    ours = epsilon([r], 1e-5)
    assert ours == pytest.approx(direct, rel=1e-10)
    assert 1.6 < ours < 1.8
    pld_direct = PLDAccountant(value_discretization_interval=1e-3)
    pld_direct.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1)), 1000))
    pld = epsilon([r], 1e-5, "pld")
    assert pld == pytest.approx(pld_direct.get_epsilon(1e-5), rel=1e-9)
    assert pld < ours  # PLD is tighter than RDP


def test_unsampled_gaussian_matches_rdp_closed_form():
    # T Gaussians, z: RDP T*alpha/(2 z^2); compare with dp-accounting directly
    r = GaussianRelease((4.0,), count=10)
    direct = _direct_rdp(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(4.0), 10), delta=1e-6)
    assert epsilon(r, 1e-6, orders=DEFAULT_RDP_ORDERS) == pytest.approx(direct, rel=1e-12)


def test_several_gaussians_per_step_equal_effective_gaussian():
    assert effective_noise_multiplier((3.0, 4.0)) == pytest.approx(1 / math.sqrt(1 / 9 + 1 / 16))
    two = GaussianRelease((3.0, 4.0), count=50, sampling="poisson", sampling_rate=0.1)
    one = GaussianRelease((effective_noise_multiplier((3.0, 4.0)),), count=50, sampling="poisson", sampling_rate=0.1)
    assert epsilon(two, 1e-5) == pytest.approx(epsilon(one, 1e-5), rel=1e-12)
    # dp-accounting's own treatment of a composed Gaussian inside Poisson sampling
    direct = _direct_rdp(
        dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(0.1, dpa.ComposedDpEvent([dpa.GaussianDpEvent(3.0), dpa.GaussianDpEvent(4.0)])),
            50,
        )
    )
    assert epsilon(two, 1e-5, orders=DEFAULT_RDP_ORDERS) == pytest.approx(direct, rel=1e-10)
    assert epsilon(two, 1e-5, "pld") == pytest.approx(epsilon(one, 1e-5, "pld"), rel=1e-12)


def test_without_replacement_neighbouring_relations():
    wor_ro = GaussianRelease(
        (2.0,), count=20, sampling="without_replacement", population=1000, sample_size=100, neighbouring="replace_one"
    )
    direct = _direct_rdp(
        dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(1000, 100, dpa.GaussianDpEvent(2.0)), 20),
        relation=NR.REPLACE_ONE,
    )
    assert epsilon(wor_ro, 1e-5, orders=DEFAULT_RDP_ORDERS) == pytest.approx(direct, rel=1e-10)
    # PLD: the replace-one without-replacement pair is that of Poisson sampling at rate m/n under
    # add/remove, composed in both directions; tighter than the WBK19 RDP bound
    pois = GaussianRelease((2.0,), count=20, sampling="poisson", sampling_rate=0.1)
    assert epsilon(wor_ro, 1e-5, "pld") == pytest.approx(epsilon(pois, 1e-5, "pld"), rel=1e-12)
    assert epsilon(wor_ro, 1e-5, "pld") < epsilon(wor_ro, 1e-5)

    wor_ar = GaussianRelease((2.0,), count=20, sampling="without_replacement", population=1000, sample_size=100)
    poisson = GaussianRelease((2.0,), count=20, sampling="poisson", sampling_rate=0.1)
    # the Poisson approximation is opt-in only, and its note says it is not a guarantee (amendment A-2)
    approx = epsilon(wor_ar, 1e-5, wor_add_remove="poisson")
    assert approx == pytest.approx(epsilon(poisson, 1e-5), rel=1e-12)
    assert any("NOT a valid DP guarantee" in n for n in accounting_notes([wor_ar], "poisson"))
    # default (sound): replace-one bound at half the noise multiplier
    half = GaussianRelease(
        (1.0,), count=20, sampling="without_replacement", population=1000, sample_size=100, neighbouring="replace_one"
    )
    assert epsilon(wor_ar, 1e-5) == pytest.approx(epsilon(half, 1e-5), rel=1e-12)
    assert epsilon(wor_ar, 1e-5) > approx


def test_pld_accounts_dp_fedc_runs_that_mix_full_batch_and_subsampled_rounds():
    """Full-batch rounds (every record in the batch) are unsampled Gaussians, accounted as add/remove;
    the later, subsampled rounds are replace-one without replacement. The PLD accountant used to
    refuse the mix ("one neighbouring relation"), so the report's epsilon_pld was null."""
    import numpy as np

    from fedclust.clustering import dp_fedc
    from fedclust.privacy.report import privacy_report

    rel = dp_fedc.planned_releases(
        np.array([200, 200, 200]), rounds=10, clients_per_round=2, q2="diminishing", b=50, eps_bar=5.0, delta=1e-4
    )
    full = [r for r in rel if r.sample_size == r.population]
    assert full and len(full) < len(rel)  # the mix
    rep = privacy_report(rel, 1e-4, method="dp_fedc", mechanism="gaussian")
    assert rep["epsilon_pld"] is not None
    assert epsilon(full, 1e-4, "pld") < rep["epsilon_pld"] < rep["epsilon_rdp"]
    # full batch only: the same Gaussian under either relation
    only_full = dp_fedc.planned_releases(
        np.array([20, 20]), rounds=3, clients_per_round=2, q2=5, b=50, eps_bar=5.0, delta=1e-4
    )
    (r,) = only_full
    same = GaussianRelease(r.noise_multipliers, count=r.count)
    assert epsilon(only_full, 1e-4, "pld") == pytest.approx(epsilon(same, 1e-4, "pld"), rel=1e-12)


def test_composition_empty_and_non_private():
    a = GaussianRelease((1.5,), count=30, sampling="poisson", sampling_rate=0.05)
    b = GaussianRelease((1.5,), count=70, sampling="poisson", sampling_rate=0.05)
    ab = GaussianRelease((1.5,), count=100, sampling="poisson", sampling_rate=0.05)
    assert epsilon([a, b], 1e-5) == pytest.approx(epsilon(ab, 1e-5), rel=1e-12)
    assert epsilon([a, b], 1e-5) > epsilon(a, 1e-5)
    assert epsilon([a.to_dict()], 1e-5) == epsilon(a, 1e-5)  # dicts accepted
    assert epsilon([], 1e-5) == 0.0
    assert epsilon([GaussianRelease((1.0,), count=0)], 1e-5) == 0.0
    assert epsilon([a, GaussianRelease((0.0,), count=1)], 1e-5) == math.inf
    assert epsilon([GaussianRelease((0.0,), count=1)], 1e-5, "pld") == math.inf


def test_split_noise_multipliers():
    zs = split_noise_multipliers(2.0, (0.25, 0.75))
    assert zs == pytest.approx((4.0, 2.0 / math.sqrt(0.75)))
    assert effective_noise_multiplier(zs) == pytest.approx(2.0)  # weights summing to 1 keep z_eff = z
    assert split_noise_multipliers(2.0, (1, 1)) == (2.0, 2.0)
    with pytest.raises(ValueError, match="weights"):
        split_noise_multipliers(1.0, (0.5, 0.0))


@pytest.mark.parametrize(
    "target,kw",
    [
        (1.0, dict(steps=10)),
        (3.0, dict(steps=1000, sampling="poisson", sampling_rate=0.01)),
        (2.0, dict(steps=100, sampling="poisson", sampling_rate=0.1, n_mechanisms=2)),
        (2.0, dict(steps=100, sampling="poisson", sampling_rate=0.1, weights=(0.2, 0.8))),
        (1.0, dict(steps=200, sampling="poisson", sampling_rate=0.02, accountant="pld")),
        pytest.param(  # 2 s: slow; the others run in make test-fast (a step too few fails them)
            4.0,
            dict(steps=30, sampling="without_replacement", population=500, sample_size=50, neighbouring="replace_one"),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_calibration_round_trip(target, kw):
    z = calibrate_noise_multiplier(target, 1e-5, **kw)
    w = kw.get("weights", (1.0,) * kw.get("n_mechanisms", 1))
    rel = dict(
        count=kw["steps"],
        sampling=kw.get("sampling", "none"),
        sampling_rate=kw.get("sampling_rate", 1.0) if kw.get("sampling") == "poisson" else 1.0,
        population=kw.get("population"),
        sample_size=kw.get("sample_size"),
        neighbouring=kw.get("neighbouring", "add_remove"),
    )
    acc = kw.get("accountant", "rdp")
    eps = epsilon(GaussianRelease(split_noise_multipliers(z, w), **rel), 1e-5, acc)
    assert eps <= target * (1 + 1e-9)
    assert eps == pytest.approx(target, rel=0.01)
    # smallest: 1% less noise overshoots the target
    assert epsilon(GaussianRelease(split_noise_multipliers(0.99 * z, w), **rel), 1e-5, acc) > target


def test_calibration_monotone_in_epsilon_and_steps():
    kw = dict(sampling="poisson", sampling_rate=0.05)
    z1 = calibrate_noise_multiplier(1.0, 1e-5, steps=100, **kw)
    z2 = calibrate_noise_multiplier(2.0, 1e-5, steps=100, **kw)
    z3 = calibrate_noise_multiplier(1.0, 1e-5, steps=400, **kw)
    assert z2 < z1 < z3


def test_invalid_inputs_name_parameter():
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_noise_multiplier(0.0, 1e-5, steps=10)
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_noise_multiplier(-1.0, 1e-5, steps=10)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="delta"):
            calibrate_noise_multiplier(1.0, bad, steps=10)
        with pytest.raises(ValueError, match="delta"):
            epsilon([GaussianRelease((1.0,))], bad)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="sampling_rate"):
            calibrate_noise_multiplier(1.0, 1e-5, steps=10, sampling="poisson", sampling_rate=bad)
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="steps"):
            calibrate_noise_multiplier(1.0, 1e-5, steps=bad)
    with pytest.raises(ValueError, match="population"):
        calibrate_noise_multiplier(1.0, 1e-5, steps=10, sampling="without_replacement", sampling_rate=0.1)
    with pytest.raises(ValueError, match="accountant"):
        epsilon([GaussianRelease((1.0,))], 1e-5, "moments")


def test_unsampled_replace_one_gaussian_matches_exact_gaussian():
    # noise multiplier relative to the replace-one sensitivity: the exact epsilon is the analytic
    # Gaussian's (Balle & Wang 2018), under either accountant
    r = GaussianRelease((5.0,), count=1, neighbouring="replace_one", unit="sample")
    exact = dpa.get_epsilon_gaussian(5.0, 1e-5)
    assert epsilon(r, 1e-5, "pld") == pytest.approx(exact, rel=0.01)
    assert epsilon(r, 1e-5, "pld") == pytest.approx(epsilon(GaussianRelease((5.0,)), 1e-5, "pld"), rel=1e-12)
    assert epsilon(r, 1e-5, "rdp") >= exact
