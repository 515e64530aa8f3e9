"""SecAgg+'s encoding of our uploads: chosen from public bounds, exact on integers, and within its
documented error on real values, with Flower's own quantizer and decoding."""

import numpy as np
import pytest

from fedclust.deploy.local import secagg_sum
from fedclust.deploy.quantize import INT32, MODULUS, choose_encoding, exact_sum, max_error


@pytest.mark.parametrize("rows, std, n", [(1797, 0.0, 10), (1797, 40.0, 10), (60, 3.0, 3), (10_000, 0.0, 100)])
def test_the_encoding_cannot_wrap_and_its_grid_is_a_power_of_two(rows, std, n):
    enc = choose_encoding(rows, std, n)
    assert enc.clipping_range >= rows + 10 * std  # a share leaves the range with probability < 1e-22
    assert n * enc.quantization_range < MODULUS and enc.quantization_range < INT32
    g = enc.grid
    assert g == 2 ** int(np.log2(g))  # exact floating-point arithmetic on the grid
    assert n * 2 * enc.clipping_range * (2 * g) >= MODULUS or 2 * enc.clipping_range * 2 * g >= INT32  # largest


def test_integer_uploads_sum_exactly_even_at_the_range_ends():
    rng = np.random.default_rng(0)
    n, rows = 7, 300
    enc = choose_encoding(rows, 0.0, n)
    uploads = [[rng.integers(-rows, rows + 1, size=(5, 4)).astype(float), np.array([float(rows)])] for _ in range(n)]
    uploads[0][0][:] = enc.clipping_range  # the largest value the encoding carries, in every client
    uploads[1][0][:] = -enc.clipping_range
    got = [exact_sum(a, n, enc) for a in secagg_sum(uploads, enc)]
    for g, want in zip(got, [sum(u[i] for u in uploads) for i in range(2)]):
        np.testing.assert_array_equal(g, want)


def test_real_uploads_stay_within_the_documented_error():
    # sums of clipped samples in units of the clip: up to `rows` per entry, plus a noise share
    rng = np.random.default_rng(1)
    n, rows, std = 10, 180, 2.0
    enc = choose_encoding(rows, std, n)
    uploads = [[rng.uniform(-rows, rows, size=2000) + rng.normal(0, std, 2000)] for _ in range(n)]
    err = exact_sum(secagg_sum(uploads, enc)[0], n, enc) - sum(u[0] for u in uploads)
    assert np.abs(err).max() <= max_error(enc, n)
    # stochastic rounding is unbiased with variance <= step^2 / 4 per client
    assert abs(err.mean()) < 4 * np.sqrt(n) / (2 * enc.grid) / np.sqrt(err.size)
    assert err.std() <= np.sqrt(n) / (2 * enc.grid)


def test_bounds_the_modulus_cannot_carry_are_refused():
    with pytest.raises(ValueError, match="2\\^32"):
        choose_encoding(10**9, 0.0, 10)
