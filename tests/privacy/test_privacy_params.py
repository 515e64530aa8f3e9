"""The privacy parameters are checked before any noise is calibrated: delta is a number in (0, 1)
(null or text gets one clear line), and in a private run below 1/n, n being the protected units
(the samples, or the clients for client-level DP), unless privacy.allow_large_delta says otherwise."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from fedclust.data.registry import prepare_dataset
from fedclust.params_check import ParameterError
from fedclust.partition import make_partition
from fedclust.pipelines.methods import node_functions
from fedclust.registry import REGISTRY
from fedclust.registry.privacy import check_delta_against_units, check_privacy_params
from fedclust.registry.spec import protected_units


@pytest.fixture(scope="module")
def iris_split():
    ds = prepare_dataset("iris")  # 150 samples: 1/n = 0.00667
    return ds, make_partition("iid", X=ds.X, y=ds.y, n_clients=5, seed=0)


@pytest.mark.parametrize(
    "delta, says",
    [
        (None, "privacy.delta must be a number in (0, 1), got null"),
        ("1e-5x", "privacy.delta must be a number in (0, 1), got '1e-5x'"),
        ([1e-5], "privacy.delta must be a number in (0, 1), got [1e-05]"),
        (True, "privacy.delta must be a number in (0, 1), got true"),
        (0, "privacy.delta must be in (0, 1), got 0.0"),
        (1, "privacy.delta must be in (0, 1), got 1.0"),
        (float("nan"), "privacy.delta must be in (0, 1), got nan"),
    ],
)
def test_a_delta_that_is_not_a_number_in_0_1_gets_one_line(delta, says):
    with pytest.raises(ParameterError) as info:
        check_privacy_params({"epsilon": 1.0, "delta": delta})
    msg = str(info.value)
    assert msg.startswith(says) and "\n" not in msg


@pytest.mark.parametrize("delta", [0.5, 0.01, 1 / 150])
def test_a_delta_at_or_above_one_over_n_is_refused_naming_one_over_n(iris_split, delta):
    calibrate, _ = node_functions("fkm")
    with pytest.raises(ParameterError) as info:
        calibrate({"epsilon": 4.0, "delta": delta}, {}, *iris_split)
    msg = str(info.value)
    assert "1/n = 1/150 = 0.00667" in msg and "150 protected samples" in msg
    assert "privacy.allow_large_delta: true" in msg


def test_a_delta_just_below_one_over_n_is_accepted_without_warning(iris_split, caplog):
    calibrate, _ = node_functions("fkm")
    with caplog.at_level(logging.WARNING, logger="fedclust.privacy"):
        noise = calibrate({"epsilon": 4.0, "delta": 0.99 / 150}, {}, *iris_split)
    assert noise["private"] and noise["delta"] == pytest.approx(0.99 / 150)
    assert "1/n" not in caplog.text


def test_allow_large_delta_accepts_it_with_a_warning(iris_split, caplog):
    calibrate, _ = node_functions("fkm")
    with caplog.at_level(logging.WARNING, logger="fedclust.privacy"):
        noise = calibrate({"epsilon": 4.0, "delta": 0.5, "allow_large_delta": True}, {}, *iris_split)
    assert noise["delta"] == 0.5
    assert [r for r in caplog.records if "1/n = 1/150" in r.getMessage() and r.levelno == logging.WARNING]


def test_a_non_private_run_ignores_delta_against_n(iris_split):
    calibrate, _ = node_functions("fkm")
    assert calibrate({"epsilon": None, "delta": 0.5}, {}, *iris_split)["private"] is False


def test_client_level_dp_compares_delta_with_the_number_of_clients():
    rotated = SimpleNamespace(group=np.zeros(40, dtype=int), y_train=np.zeros(4000))
    spec = REGISTRY["rr_cluster"]
    assert spec.unit == "client" and protected_units(spec, rotated) == 40
    # client-level DP: delta is compared with 1/40 (the clients), not with 1/4000 (the samples)
    assert check_delta_against_units({"epsilon": 4.0, "delta": 1e-3}, 40, "client") == 1e-3
    with pytest.raises(ParameterError, match=r"1/n = 1/40 = 0\.025 \(n = 40 protected clients\)"):
        check_delta_against_units({"epsilon": 4.0, "delta": 0.03}, protected_units(spec, rotated), spec.unit)


def test_allow_large_delta_must_be_a_boolean():
    with pytest.raises(ParameterError, match="privacy.allow_large_delta must be true or false, got 'yes'"):
        check_privacy_params({"epsilon": 1.0, "delta": 1e-5, "allow_large_delta": "yes"})


def test_an_unknown_accountant_is_refused_by_name():
    with pytest.raises(ParameterError, match=r"privacy.accountant must be one of \['rdp', 'pld'\], got 'rpd'"):
        check_privacy_params({"epsilon": 1.0, "accountant": "rpd"})
