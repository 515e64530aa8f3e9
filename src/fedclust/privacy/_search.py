"""Log-space bisection, the one search behind every noise calibration of the privacy layer."""

from __future__ import annotations

import math
from collections.abc import Callable


def log_bisect(
    too_small: Callable[[float], bool],
    rtol: float,
    *,
    max_value: float = math.inf,
    min_value: float = 0.0,
    unreachable: Callable[[], Exception] | None = None,
) -> float:
    """The smallest ``x > 0`` (to relative tolerance ``rtol``) with ``too_small(x)`` False, for a
    predicate that is True below a threshold and False above it (e.g. "ε(z) exceeds the target").

    Brackets from ``x = 1`` by doubling (while ``too_small``; past ``max_value`` raises
    ``unreachable()``) or halving (while not; below ``min_value`` returns the last upper end), then
    bisects on ``log x`` until ``hi / lo - 1 <= rtol``. Returns the upper end of the bracket, so
    ``too_small(result)`` is False: a calibration stays on the safe side.
    """
    lo, hi = 1.0, 1.0
    if too_small(hi):
        while too_small(hi):
            lo, hi = hi, hi * 2.0
            if hi > max_value:
                raise (unreachable() if unreachable is not None else ValueError(f"no solution below {max_value:g}"))
    else:
        while not too_small(lo):
            lo, hi = lo / 2.0, lo
            if lo < min_value:
                return hi
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if too_small(mid):
            lo = mid
        else:
            hi = mid
    return hi
