"""The one check of a scalar argument of a library function (fedclust.options)."""

import math

import numpy as np
import pytest

from fedclust.options import check_int, check_number
from fedclust.params_check import ParameterError
from fedclust.privacy._validate import check_delta, check_epsilon, check_steps


def test_check_int_bounds_and_kinds():
    assert check_int("n", np.int64(3), 1, 5) == 3 and type(check_int("n", np.int64(3), 1)) is int
    with pytest.raises(ParameterError, match=r"^n must be >= 1, got 0$"):
        check_int("n", 0, 1)
    with pytest.raises(ParameterError, match=r"^n must be <= 5, got 6$"):
        check_int("n", 6, 1, 5)
    for bad in (2.5, 3.0, "3", True, None):
        with pytest.raises(ValueError, match="n must be an integer"):
            check_int("n", bad, 1)


def test_check_number_bounds_and_infinity():
    assert check_number("q", 1, gt=0, le=1) == 1.0
    with pytest.raises(ParameterError, match=r"q must be > 0, got 0"):
        check_number("q", 0, gt=0)
    with pytest.raises(ParameterError, match=r"q must be < 1, got 1"):
        check_number("q", 1, gt=0, lt=1)
    with pytest.raises(ParameterError, match="finite"):
        check_number("eps", math.inf, gt=0)
    assert check_number("eps", math.inf, gt=0, allow_inf=True) == math.inf
    with pytest.raises(ParameterError, match="finite"):
        check_number("eps", math.nan, gt=0, allow_inf=True)


def test_privacy_checks_use_it():
    assert check_epsilon(math.inf) == math.inf
    assert check_steps(5.0, "T") == 5 and type(check_steps(5.0, "T")) is int
    with pytest.raises(ParameterError, match="T must be an integer"):
        check_steps(5.5, "T")
    with pytest.raises(ParameterError, match=r"delta must be < 1"):
        check_delta(1.0)
