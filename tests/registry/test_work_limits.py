"""The work estimate covers every loop bound of every method, and the pre-run check refuses a run
that would take too long before any data is built. Generated from the registry: every config field
declared with ``param(loop=...)``, and every other integer field said to bound no loop (with why)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from fedclust.errors import FedclustError, user_message
from fedclust.registry import REGISTRY
from fedclust.registry.checks import check_run_params
from fedclust.registry.helpers import WorkLimitError
from fedclust.registry.spec import WorkSizes, work_of

ROOT = Path(__file__).resolve().parents[2]

#: integer fields that bound no loop, and why x1e6 of them cannot run for ages
NOT_LOOPS = {
    "k": "a size, refused above the number of samples (refuse_absurd) and in the memory check",
    "clients_per_round": "at most the number of clients (refuse_absurd)",
    "n_components": "a dimension, at most the number of features",
    "b": "DP-FedC's minibatch, min(b, n_i): at most a client's samples",
    "d": "FedSC's dictionary size, at most d_max and n",
    "d_max": "a cap on d",
    "batch_size": "a minibatch, at most a client's samples",
    "eval_every": "a period: a larger value evaluates less often",
    "B": "RR-Cluster's updates per cluster, refused above participation x clients / k (feasibility)",
}


def _reference() -> dict:
    """The parameters of conf/base (every parameters*.yml merged, as Kedro merges them)."""
    out: dict = {}
    for path in sorted((ROOT / "conf" / "base").glob("parameters*.yml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


REFERENCE = _reference()


def _used(method: str) -> set[str]:
    return {
        "params:dataset",
        "params:partition",
        "params:privacy",
        "params:clustered_fl.data",
        f"params:{method}.train",
    }


def _loop_fields():
    for method, spec in REGISTRY.items():
        for name, f in spec.config.fields().items():
            if f.metadata.get("loop"):
                yield pytest.param(method, name, id=f"{method}.{name}")


LOOP_FIELDS = list(_loop_fields())


def _int_fields():
    for spec in REGISTRY.values():
        for name, f in spec.config.fields().items():
            if "int" in f.metadata["kind"]:
                yield spec.name, name, f


def test_every_integer_parameter_is_a_loop_bound_or_said_not_to_be():
    unclassified = [f"{m}.{n}" for m, n, f in _int_fields() if not f.metadata.get("loop") and n not in NOT_LOOPS]
    assert unclassified == []
    assert len(LOOP_FIELDS) >= 29  # rounds, Q1, Q2, Qhat, local_steps, server_iters, ... of 13 methods


def _base_value(method: str, name: str) -> int:
    default = REGISTRY[method].config.fields()[name].default
    return default if isinstance(default, int) and not isinstance(default, bool) and default >= 1 else 10


def _params(method: str, name: str, value) -> dict:
    params = copy.deepcopy(REFERENCE)
    params[method]["train"][name] = value
    if name == "private_rounds":  # a bound of private runs only
        params["privacy"]["epsilon"] = 4.0
    return params


def _estimate(method: str, name: str, value) -> float:
    spec = REGISTRY[method]
    cfg = spec.config_from({name: value})
    sizes = WorkSizes(1797, 64, 10, 10) if spec.family == "clustering" else WorkSizes(40 * 60, 64, 40, 10)
    return work_of(spec, cfg, sizes, private=name == "private_rounds")["total"]


@pytest.mark.parametrize("method, name", LOOP_FIELDS)
def test_the_estimate_grows_with_every_loop_bound(method, name):
    base = _base_value(method, name)
    # x1e6 of one bound multiplies its part of the run, at least 1 % of the whole at the defaults
    assert _estimate(method, name, base * 10**6) >= 1e4 * _estimate(method, name, base)


@pytest.mark.parametrize("method, name", LOOP_FIELDS)
def test_a_loop_bound_x1e6_is_refused_before_training(method, name):
    """x1e6 of the default, at least 1e7: a bound of 1 or 5 at x1e6 (FedDP-KMeans's steps, the
    private rounds) is a run of 1e6 to 5e6 rounds of about 2 ms (digits, 10 clients), 35 minutes to
    3 hours, inside compute.max_work by design; 1e7 is beyond it."""
    value = max(_base_value(method, name), 10) * 10**6
    with pytest.raises(FedclustError) as info:
        check_run_params(_params(method, name, value), REFERENCE, _used(method))
    message = user_message(info.value)
    assert "\n" not in message
    if isinstance(info.value, WorkLimitError):  # the bound is named, with the way out
        assert f"lower {method}.train.{name} (= {value})" in message
        assert "raise compute.max_work (null: no limit)" in message
    else:  # a bound refused by its own rule first (DK++'s seeding rounds must leave room)
        assert f"{method}.train" in message


@pytest.mark.parametrize("method", list(REGISTRY))
def test_the_defaults_pass_the_pre_run_check_in_and_out_of_privacy(method):
    check_run_params(REFERENCE, REFERENCE, _used(method))
    private = copy.deepcopy(REFERENCE)
    private["privacy"]["epsilon"] = 4.0
    check_run_params(private, REFERENCE, _used(method))


def test_dp_fedc_q1_of_the_report_is_refused_naming_q1():
    with pytest.raises(WorkLimitError, match=r"lower dp_fedc\.train\.Q1 \(= 99999999999\)"):
        check_run_params(_params("dp_fedc", "Q1", 99999999999), REFERENCE, _used("dp_fedc"))


def test_no_limit_accepts_it():
    params = _params("dp_fedc", "Q1", 99999999999)
    params["compute"]["max_work"] = None
    try:
        check_run_params(params, REFERENCE, _used("dp_fedc"))
    finally:
        check_run_params(REFERENCE, REFERENCE, _used("dp_fedc"))  # the default limit back
    assert math.isfinite(_estimate("dp_fedc", "Q1", 99999999999))
