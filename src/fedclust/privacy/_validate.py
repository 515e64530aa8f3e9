"""Named checks of the privacy layer's arguments, on the project's one scalar check
(:func:`fedclust.options.check_number`, :func:`fedclust.options.check_int`): each error names the
parameter and its range."""

from __future__ import annotations

from fedclust.options import check_int, check_number


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """epsilon > 0 (infinity allowed: no privacy)."""
    return check_number(name, epsilon, gt=0, allow_inf=True)


def check_delta(delta, name: str = "delta") -> float:
    return check_number(name, delta, gt=0, lt=1)


def check_rate(q, name: str = "q") -> float:
    return check_number(name, q, gt=0, le=1)


def check_steps(steps, name: str = "steps") -> int:
    """An integer >= 1 (an integer-valued float such as 5.0 counts, as it always has here)."""
    if isinstance(steps, float) and steps.is_integer():
        steps = int(steps)
    return check_int(name, steps, 1)


def check_positive(x, name: str) -> float:
    return check_number(name, x, gt=0)
