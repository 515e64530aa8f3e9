"""Clipping, Gaussian noise and the classical / analytic Gaussian sigma."""

import math
import warnings

import dp_accounting
import numpy as np
import pytest
import torch

from fedclust.privacy.mechanisms import (
    PrivacyWarning,
    add_gaussian_noise,
    analytic_delta,
    analytic_sigma,
    classical_sigma,
    clip_by_norm,
    clip_rows,
)


def test_clip_by_norm_vector_and_matrix():
    v, was = clip_by_norm(np.array([3.0, 4.0]), 1.0)
    assert was is True
    np.testing.assert_allclose(v, [0.6, 0.8])
    w, was = clip_by_norm(np.array([0.3, 0.4]), 1.0)
    assert was is False
    np.testing.assert_allclose(w, [0.3, 0.4])
    m = np.full((2, 2), 2.0)  # Frobenius norm 4
    c, was = clip_by_norm(m, 2.0)
    assert was and math.isclose(np.linalg.norm(c), 2.0)
    np.testing.assert_allclose(c, np.ones((2, 2)))
    t, was = clip_by_norm(torch.tensor([3.0, 4.0]), 2.5)
    assert was and torch.allclose(t, torch.tensor([1.5, 2.0]))


def test_clip_rows_numpy_and_torch_agree():
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [6.0, 8.0]])
    c, n = clip_rows(x, 1.0)
    assert n == 2
    np.testing.assert_allclose(np.linalg.norm(c, axis=1), [1.0, 0.5, 0.0, 1.0])
    np.testing.assert_allclose(c[0], [0.6, 0.8])  # direction kept
    np.testing.assert_allclose(x[0], [3.0, 4.0])  # input untouched
    ct, nt = clip_rows(torch.tensor(x, dtype=torch.float32), 1.0)
    assert nt == 2 and ct.dtype == torch.float32
    np.testing.assert_allclose(ct.numpy(), c, rtol=1e-6)


def test_clip_rows_integer_input_gives_floats():
    c, n = clip_rows(np.array([[3, 4], [0, 1]]), 1.0)
    assert n == 1 and c.dtype == np.float64
    np.testing.assert_allclose(c, [[0.6, 0.8], [0.0, 1.0]])


def test_clip_rows_frobenius_per_item():
    x = np.stack([np.full((2, 3), 1.0), np.full((2, 3), 0.1)])  # norms sqrt(6), sqrt(0.06)
    c, n = clip_rows(x, 1.0)
    assert n == 1
    np.testing.assert_allclose(np.linalg.norm(c.reshape(2, -1), axis=1), [1.0, math.sqrt(0.06)])


def test_clip_invalid_norm_names_parameter():
    with pytest.raises(ValueError, match="max_norm"):
        clip_rows(np.ones((2, 2)), 0.0)
    with pytest.raises(ValueError, match="max_norm"):
        clip_by_norm(np.ones(2), -1.0)


def test_add_gaussian_noise_reproducible_and_calibrated():
    x = np.zeros((400, 50))
    a = add_gaussian_noise(x, 2.0, np.random.default_rng(0))
    b = add_gaussian_noise(x, 2.0, np.random.default_rng(0))
    np.testing.assert_array_equal(a, b)
    assert abs(a.std() - 2.0) < 0.05
    assert np.all(x == 0)  # not modified in place
    # per-row std broadcast
    std = np.array([[0.0], [1.0], [10.0]])
    y = add_gaussian_noise(np.zeros((3, 20000)), std, np.random.default_rng(1))
    assert np.all(y[0] == 0)
    assert abs(y[1].std() - 1.0) < 0.03 and abs(y[2].std() - 10.0) < 0.3
    # zero std: nothing drawn, a copy returned
    rng = np.random.default_rng(5)
    z = add_gaussian_noise(np.ones(3), 0.0, rng)
    np.testing.assert_array_equal(z, np.ones(3))
    assert rng.standard_normal() == np.random.default_rng(5).standard_normal()


def test_add_gaussian_noise_torch_matches_numpy():
    xn = np.ones((4, 3))
    xt = torch.ones((4, 3), dtype=torch.float64)
    a = add_gaussian_noise(xn, 0.5, np.random.default_rng(7))
    b = add_gaussian_noise(xt, 0.5, np.random.default_rng(7))
    assert isinstance(b, torch.Tensor) and b.dtype == torch.float64
    np.testing.assert_allclose(b.numpy(), a)
    with pytest.raises(ValueError, match="std"):
        add_gaussian_noise(xn, -1.0, np.random.default_rng(0))


def test_classical_sigma_hand_value_and_warning():
    # 2 * sqrt(2 ln(125000)) / 0.5 = 2 * 4.84475 / 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = classical_sigma(0.5, 1e-5, sensitivity=2.0)
    assert s == pytest.approx(19.379, abs=1e-3)
    with pytest.warns(PrivacyWarning, match="epsilon"):
        classical_sigma(1.0, 1e-5)
    assert issubclass(PrivacyWarning, UserWarning)


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-5), (0.5, 1e-6), (0.9, 1e-3), (3.0, 1e-5), (10.0, 1e-8)])
def test_analytic_sigma_exact_condition_and_reference(eps, delta):
    s = analytic_sigma(eps, delta)
    # independent implementation (dp-accounting, Balle & Wang 2018)
    assert s == pytest.approx(dp_accounting.get_sigma_gaussian(eps, delta), rel=1e-6)
    # satisfies the exact condition and is (nearly) the smallest that does
    assert analytic_delta(s, eps) <= delta
    assert analytic_delta(s * 0.999, eps) > delta
    # linear in the sensitivity
    assert analytic_sigma(eps, delta, sensitivity=3.0) == pytest.approx(3.0 * s, rel=1e-9)
    if eps < 1:
        assert s < classical_sigma(eps, delta)


@pytest.mark.parametrize("fn", [classical_sigma, analytic_sigma])
def test_sigma_invalid_inputs_name_parameter(fn):
    with pytest.raises(ValueError, match="epsilon"):
        fn(0.0, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        fn(-1.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        fn(0.5, 0.0)
    with pytest.raises(ValueError, match="delta"):
        fn(0.5, 1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        fn(0.5, 1e-5, 0.0)
