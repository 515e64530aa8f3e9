"""Named checks of the privacy layer's arguments, on the project's one scalar check
(:func:`fedclust.options.check_number`, :func:`fedclust.options.check_int`): each error names the
parameter and its range."""

from __future__ import annotations

import logging

from fedclust.options import check_int, check_number
from fedclust.params_check import ParameterError

logger = logging.getLogger("fedclust.privacy")


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """epsilon > 0 (infinity allowed: no privacy)."""
    return check_number(name, epsilon, gt=0, allow_inf=True)


def check_delta(delta, name: str = "delta") -> float:
    """0 < delta < 1."""
    return check_number(name, delta, gt=0, lt=1)


def check_delta_for_units(
    delta, n_units: int, unit: str = "sample", *, allow_large: bool = False, name: str = "delta"
) -> float:
    """``delta`` in (0, 1) and below ``1 / n_units``, ``n_units`` being the number of protected units
    (the samples, or the clients for client-level DP). A delta of ``1/n`` or more permits a mechanism
    that publishes one unit's data in the clear with probability delta, so about one unit of the
    ``n`` outright, whatever epsilon says: refused unless ``allow_large`` (then a warning is logged)."""
    delta = check_delta(delta, name)
    n = int(n_units)
    if n < 1 or delta < 1.0 / n:
        return delta
    what = f"{name} = {delta:g} is >= 1/n = 1/{n} = {1.0 / n:.3g} (n = {n} protected {unit}s)"
    if not allow_large:
        raise ParameterError(
            f"{what}: a delta that large allows publishing a {unit}'s data in the clear. Set {name} well "
            f"below 1/n (e.g. {_below(n):g}), or set privacy.allow_large_delta: true to accept it"
        )
    logger.warning("%s: accepted (privacy.allow_large_delta), but the guarantee is weak at that delta", what)
    return delta


def _below(n: int) -> float:
    """A round delta about 1/(10 n): 10^floor(log10(1/(10 n)))."""
    out = 1.0
    while out >= 0.1 / n:
        out /= 10
    return out


def check_rate(q, name: str = "q") -> float:
    return check_number(name, q, gt=0, le=1)


def check_steps(steps, name: str = "steps") -> int:
    """An integer >= 1 (an integer-valued float such as 5.0 counts, as it always has here)."""
    if isinstance(steps, float) and steps.is_integer():
        steps = int(steps)
    return check_int(name, steps, 1)


def check_positive(x, name: str) -> float:
    return check_number(name, x, gt=0)
