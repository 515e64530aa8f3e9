"""The root searches of the privacy layer, in one place: every noise calibration and every audit
search uses one of these two.

* :func:`log_bisect`: for a predicate (True below a threshold, False above), bisection on ``log x``;
  it returns the safe end of the bracket.
* :func:`falsi_root`: for an increasing function that is cheap to compare but expensive to call (an
  accountant over many releases), regula falsi with the Illinois modification from a guess: a few
  calls where bisection needs a dozen.
"""

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


def falsi_root(g, x0: float, lo: float, hi: float, tol: float, step: float = math.log(4.0), g0: float | None = None):
    """The largest x (within ``tol``) with g(x) <= 0 for an increasing g, from the guess x0, on [lo, hi]:
    bracketing by doubling steps, then regula falsi with the Illinois modification. Returns
    ``(x, g(x))`` with g(x) <= 0, or ``(hi, None)`` when g(hi) <= 0 and ``(lo, g(lo))`` when g(lo) > 0."""
    x = min(max(x0, lo), hi)
    gx = g(x) if g0 is None else g0
    if gx <= 0:
        a, ga = x, gx
        while True:
            b = min(a + step, hi)
            gb = g(b)
            if gb > 0:
                break
            if b >= hi:
                return hi, None
            a, ga, step = b, gb, 2 * step
    else:
        b, gb = x, gx
        while True:
            a = max(b - step, lo)
            ga = g(a)
            if ga <= 0:
                break
            if a <= lo:
                return lo, ga
            b, gb, step = a, ga, 2 * step
    side = 0
    fa, fb = ga, gb  # the (Illinois-scaled) end values used for interpolation
    for _ in range(200):
        if b - a < tol or -tol < ga <= 0:
            break
        x = b - fb * (b - a) / (fb - fa)
        x = min(max(x, a + 1e-3 * (b - a)), b - 1e-3 * (b - a))  # strictly inside the bracket
        gx = g(x)
        if gx <= 0:
            a, ga, fa = x, gx, gx
            if side == -1:
                fb /= 2.0  # the other end was kept twice
            side = -1
        else:
            b, gb, fb = x, gx, gx
            if side == 1:
                fa /= 2.0
            side = 1
    return a, ga
