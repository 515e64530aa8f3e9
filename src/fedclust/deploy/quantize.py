"""SecAgg+'s fixed-point encoding of our uploads, chosen from public values, and its error.

Flower's SecAgg+ sums integers modulo ``modulus_range``. Every client first clips each entry of its
upload to ``[-c, c]`` (``clipping_range``), shifts it by ``c`` and maps it onto the integers
``0 .. R`` (``quantization_range``) with stochastic rounding; the server sums the masked integers,
unmasks the sum and maps it back. The workflow returns the *weighted average* of the uploads with
weight ``num_examples / max_weight`` per client; every client of ours reports one example and the
workflow uses ``max_weight = 1``, so every weight is exactly 1 and the average times the number of
clients whose vectors reached the sum is the sum (:func:`exact_sum`).

We choose the encoding so that it loses nothing we rely on:

* **Units.** Every upload is divided by a public unit before encoding (the clip for sums of
  clipped samples, the clip squared for second moments, 1 for counts), so that each entry of a
  client's statistic is at most its number of samples, ``rows``, in absolute value.
* **Range.** ``c = ceil(rows + 10 * s)`` with ``s`` the largest noise-share std in those units:
  a share leaves ``[-c, c]`` with probability below ``1e-22`` per entry, and the clip of Flower's
  encoding then never acts.
* **Grid.** ``R = 2 c g`` with ``g`` the largest power of two for which the sum of ``n`` clients
  cannot wrap around the modulus (``n R < 2^32``) and ``R < 2^31`` (Flower rounds to int32). The
  grid step ``1 / g`` is then a power of two: integers (counts, histograms) and their sums are
  carried *exactly*, and the server's arithmetic on the grid is exact in floating point.

Error. Stochastic rounding is unbiased and moves an entry by less than one grid step, so the
sum of ``n`` uploads differs from the sum of the unrounded uploads by at most ``n / g`` units per
entry (:func:`max_error`), with standard deviation at most ``sqrt(n) / (2 g)`` units. At the
default sizes (digits: 10 clients, the data set's 1797 rows as the public bound) ``g = 2^16`` and the
bound is ``1.5e-4`` units; the noise of a private run is ``10^3`` to ``10^5`` times larger.

Privacy. The accountant counts the Gaussian shares only. The rounding of a share to the grid is
not post-processing of the noisy *sum* (each client rounds its own noisy value), so the released
sum is the Gaussian sum plus a data-dependent error of at most ``n / g`` units per entry; we
report its bound next to the noise rather than fold it into epsilon (a discrete Gaussian, as in
distributed DP over secure aggregation, would close that gap).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: Flower's masks are drawn below ``modulus_range``; 2^32 is its default and the largest it allows.
MODULUS = 2**32
#: Flower's stochastic rounding casts to int32.
INT32 = 2**31
#: Noise-share stds of headroom in the clipping range.
HEADROOM = 10.0


@dataclasses.dataclass(frozen=True)
class Encoding:
    """SecAgg+'s quantization of one release: ``clipping_range`` ``c``, ``quantization_range`` ``R``,
    ``modulus_range`` and the grid ``g = R / (2c)`` (grid step ``1 / g`` units)."""

    clipping_range: float
    quantization_range: int
    modulus_range: int = MODULUS

    @property
    def grid(self) -> float:
        return self.quantization_range / (2.0 * self.clipping_range)

    def workflow_kwargs(self) -> dict:
        """The quantization keyword arguments of :class:`flwr.server.workflow.SecAggPlusWorkflow`."""
        return {
            "clipping_range": float(self.clipping_range),
            "quantization_range": int(self.quantization_range),
            "modulus_range": int(self.modulus_range),
            "max_weight": 1.0,
        }


def choose_encoding(rows: int, share_std_units: float, n_clients: int) -> Encoding:
    """The encoding of a release whose uploads are at most ``rows`` in absolute value per entry
    (in units) before a Gaussian share of std ``share_std_units``, summed over ``n_clients``."""
    if rows < 1 or n_clients < 1:
        raise ValueError(f"rows and n_clients must be >= 1, got {rows}, {n_clients}")
    c = math.ceil(rows + HEADROOM * max(float(share_std_units), 0.0))
    g = 1
    while n_clients * 2 * c * (2 * g) < MODULUS and 2 * c * (2 * g) < INT32:
        g *= 2
    if n_clients * 2 * c * g >= MODULUS or 2 * c * g >= INT32:
        raise ValueError(
            f"SecAgg+ cannot carry {n_clients} uploads of magnitude {c} on a 2^32 modulus: "
            "lower the bound on a client's rows or the noise"
        )
    return Encoding(clipping_range=float(c), quantization_range=int(2 * c * g))


def max_error(encoding: Encoding, n_clients: int) -> float:
    """The largest difference, per entry and in units, between the sum SecAgg+ returns and the sum
    of the clients' unrounded uploads (each rounding moves an entry by less than a grid step)."""
    return n_clients / encoding.grid


def exact_sum(average: np.ndarray, n_clients: int, encoding: Encoding) -> np.ndarray:
    """The sum of ``n_clients`` uploads from SecAgg+'s weighted average with unit weights: the average
    times ``n_clients``, snapped back onto the grid (the sum of grid points is a grid point, and the
    float error of Flower's division is far below half a step)."""
    g = encoding.grid
    return np.round(np.asarray(average, dtype=np.float64) * n_clients * g) / g
