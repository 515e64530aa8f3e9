"""A fuzzer of the parameters (Hypothesis): for every key of conf/base/parameters*.yml, values of the
wrong type, out of range, huge, null, or lists. Each case ends in a valid configuration or a clean
error from the pre-run check, run in process (:func:`fedclust.registry.checks.check_run_params`, what
the Kedro hook runs before anything): fedclust's error class, whose message the command line prints
in at most 5 lines. Never another exception (a traceback), never a hang (a deadline per case).

A few cases go through a real ``kedro run`` too (slow), to see the same errors as a user does.
"""

from __future__ import annotations

import copy
import math
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedclust.errors import FedclustError, user_message
from fedclust.params_check import FREE_FORM_KEYS
from fedclust.registry.checks import check_run_params
from fedclust.registry.helpers import WORK_LIMIT_DEFAULT, set_work_limit

ROOT = Path(__file__).resolve().parents[2]

#: a bounded, reproducible run: a few examples per key (about 2,300 in all), 2 s per case at most
FUZZ = settings(
    max_examples=6,
    deadline=timedelta(seconds=2),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _reference() -> dict:
    """conf/base's parameters, every parameters*.yml merged (as Kedro merges them)."""
    out: dict = {}
    for path in sorted((ROOT / "conf" / "base").glob("parameters*.yml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


REFERENCE = _reference()


def _keys(tree: dict, prefix: tuple = ()) -> list[tuple]:
    """Every settable key: the leaves, and the free-form groups (options, model, ...) as values."""
    out = []
    for key, value in tree.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value and key not in FREE_FORM_KEYS:
            out.extend(_keys(value, path))
        else:
            out.append(path)
    return out


KEYS = _keys(REFERENCE)


def _get(tree: dict, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


def _with(path: tuple, value) -> dict:
    params = copy.deepcopy(REFERENCE)
    node = params
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return params


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=6),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from([0, -1, 10**9, 10**12, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.5, 1.0, 1e-300, 1e300, math.inf, -math.inf, math.nan]),
)
#: what YAML and --params can give: scalars, lists and groups of them
_VALUES = st.one_of(
    _SCALARS,
    st.lists(_SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=4), _SCALARS, max_size=2),
)


def _near_default(default):
    """Values shaped after the default: huge, negative, zero, as text, in a list."""
    if isinstance(default, bool) or default is None:
        return st.sampled_from(["true", 1, [default]])
    if isinstance(default, (int, float)):
        return st.sampled_from([default * 10**6, -default, 0, str(default), [default], type(default)(default) * 1e12])
    if isinstance(default, str):
        return st.sampled_from([default.upper(), default + "x", "", [default], {default: 1}])
    if isinstance(default, list):
        return st.sampled_from([[], [None], default * 50, [[x] for x in default], "".join(map(str, default))])
    return st.sampled_from([{"x": 1}, [default], "text"])


def _check(params: dict) -> str | None:
    """None for a configuration the pre-run check accepts, else its one-line error; anything but a
    :class:`FedclustError` (a traceback for the user) fails the test."""
    try:
        check_run_params(params, REFERENCE, None)
    except FedclustError as exc:
        message = user_message(exc)
        assert message, f"an error with no message: {exc!r}"
        printed = f"fedclust: error: {message}\n(run with -v, or FEDCLUST_TRACEBACK=1, to see the traceback)"
        assert len(printed.splitlines()) <= 5 and "Traceback" not in message
        return message
    finally:
        set_work_limit(WORK_LIMIT_DEFAULT)
    return None


@pytest.mark.parametrize("path", KEYS, ids=[".".join(map(str, k)) for k in KEYS])
@FUZZ
@given(data=st.data())
def test_any_value_of_any_key_ends_in_a_valid_config_or_one_clean_error(path, data):
    default = _get(REFERENCE, path)
    value = data.draw(st.one_of(_VALUES, _near_default(default)), label=".".join(map(str, path)))
    started = time.perf_counter()
    _check(_with(path, value))
    assert time.perf_counter() - started < 2.0


def test_the_defaults_are_valid():
    assert _check(REFERENCE) is None


def test_the_fuzzer_covers_every_key_of_conf_base():
    assert len(KEYS) > 300 and ("privacy", "delta") in KEYS and ("dp_fedc", "train", "Q1") in KEYS
