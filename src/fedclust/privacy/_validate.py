"""Shared parameter checks for the privacy layer (messages name the parameter and its range)."""

from __future__ import annotations

import math


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    e = float(epsilon)
    if not (e > 0) or math.isnan(e):
        raise ValueError(f"{name} must be > 0, got {epsilon!r}")
    return e


def check_delta(delta, name: str = "delta") -> float:
    d = float(delta)
    if not 0.0 < d < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {delta!r}")
    return d


def check_rate(q, name: str = "q") -> float:
    v = float(q)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {q!r}")
    return v


def check_steps(steps, name: str = "steps") -> int:
    if isinstance(steps, bool) or int(steps) != steps:
        raise ValueError(f"{name} must be an integer >= 1, got {steps!r}")
    t = int(steps)
    if t < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {steps!r}")
    return t


def check_positive(x, name: str) -> float:
    v = float(x)
    if not v > 0 or math.isinf(v):
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return v
