"""The privacy report: JSON-ready, both epsilons, explicit infinity for non-private runs."""

import json

import pytest

from fedclust.privacy import GaussianRelease, epsilon, privacy_report
from fedclust.privacy.report import json_ready


def test_private_report_fields_and_json():
    r = GaussianRelease((1.2,), count=200, sampling="poisson", sampling_rate=0.05, unit="sample", label="W")
    rep = privacy_report(
        [r],
        1e-5,
        method="dp_fedc",
        mechanism="gaussian",
        paper_epsilon=3.2,
        paper_formula="Theorem 3, eq. (32)",
        notes=["eps/(2q) > 1"],
    )
    back = json.loads(json.dumps(rep))
    assert back == rep
    assert rep["private"] is True and rep["unit"] == "sample-level" and rep["neighbouring"] == "add_remove"
    assert rep["delta"] == 1e-5 and rep["accountant"] == "rdp"
    assert rep["epsilon"] == rep["epsilon_accountant"] == rep["epsilon_rdp"] == pytest.approx(epsilon([r], 1e-5))
    assert rep["epsilon_pld"] == pytest.approx(epsilon([r], 1e-5, "pld"))
    assert rep["epsilon_pld"] < rep["epsilon_rdp"]
    assert rep["epsilon_paper"] == 3.2 and rep["paper_formula"].startswith("Theorem 3")
    assert rep["notes"][0] == "eps/(2q) > 1"
    assert rep["releases"][0]["noise_multipliers"] == [1.2] and rep["n_releases"] == 1
    assert GaussianRelease.from_dict(rep["releases"][0]) == r


def test_non_private_reports_infinity_explicitly():
    for releases in ([], [GaussianRelease((0.0,), count=10)]):
        rep = privacy_report(releases, 1e-3, method="ifca", mechanism="none", unit="client")
        text = json.dumps(rep)
        assert '"epsilon": "inf"' in text and '"private": false' in text
        assert rep["epsilon_rdp"] == "inf" and rep["unit"] == "client-level"
        assert any("non-private" in n for n in rep["notes"])


def test_pld_unavailable_is_noted_not_fatal():
    # sampled releases under two relations: no single PLD
    r = [
        GaussianRelease(
            (2.0,), count=20, sampling="without_replacement", population=200, sample_size=20, neighbouring="replace_one"
        ),
        GaussianRelease((2.0,), count=20, sampling="poisson", sampling_rate=0.1),
    ]
    rep = privacy_report(r, 1e-5, method="dp_fedc", mechanism="gaussian")
    assert rep["epsilon_pld"] is None and rep["epsilon"] == pytest.approx(epsilon(r, 1e-5))
    assert any("PLD" in n for n in rep["notes"])
    rep = privacy_report(r, 1e-5, method="dp_fedc", mechanism="gaussian", accountant="pld")
    assert rep["epsilon"] == pytest.approx(epsilon(r, 1e-5))  # falls back to RDP, says so
    assert any("unavailable" in n for n in rep["notes"])


def test_report_invalid_inputs():
    with pytest.raises(ValueError, match="delta"):
        privacy_report([], 0.0, method="m", mechanism="g")
    with pytest.raises(ValueError, match="unit"):
        privacy_report([], 1e-5, method="m", mechanism="g", unit="user")


def test_json_ready():
    import numpy as np

    out = json_ready({"a": float("inf"), "b": np.float32(1.5), "c": (np.int64(2), float("nan")), "d": np.arange(2)})
    assert out == {"a": "inf", "b": 1.5, "c": [2, None], "d": [0, 1]}
    json.dumps(out)
