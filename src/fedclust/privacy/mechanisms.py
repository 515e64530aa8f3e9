"""Gaussian-mechanism building blocks: clipping, noise, and the noise scale for one (ε, δ) release.

* :func:`clip_by_norm` / :func:`clip_rows`: scale a vector (or every item of a batch) down to an L2
  (Frobenius) norm bound, which is what makes the L2 sensitivity finite.
* :func:`add_gaussian_noise`: add i.i.d. ``N(0, std²)`` noise drawn from a dedicated numpy
  ``Generator`` (the run's ``"noise"`` stream, see :mod:`fedclust.rng`). Torch tensors are accepted.
* :func:`classical_sigma`: the classical Gaussian mechanism (Dwork & Roth 2014, Thm 3.22, and
  Thm A.1): ``σ = Δ·sqrt(2 ln(1.25/δ))/ε``. The theorem only holds for ``ε < 1``; a
  :class:`PrivacyWarning` is emitted for ``ε ≥ 1``.
* :func:`analytic_sigma`: the analytic Gaussian mechanism (Balle & Wang, ICML 2018, Thm 8). A
  Gaussian with std σ and L2 sensitivity Δ is (ε, δ)-DP **if and only if**

      Φ(Δ/(2σ) − εσ/Δ) − e^ε · Φ(−Δ/(2σ) − εσ/Δ) ≤ δ,

  so the smallest valid σ is found by bisection on this exact condition. It is valid for every
  ε > 0 and is always at most the classical σ.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.special import log_ndtr, ndtr

from fedclust.privacy._search import log_bisect
from fedclust.privacy._validate import check_delta, check_epsilon, check_positive

__all__ = [
    "PrivacyWarning",
    "clip_by_norm",
    "clip_rows",
    "classical_sigma",
    "analytic_sigma",
    "analytic_delta",
    "add_gaussian_noise",
]


class PrivacyWarning(UserWarning):
    """A privacy formula is used outside the assumptions of its theorem."""


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def _check_max_norm(max_norm) -> float:
    return check_positive(max_norm, "max_norm")


def clip_by_norm(v, max_norm: float):
    """Scale ``v`` (any shape) so that its L2/Frobenius norm is at most ``max_norm``.

    Returns ``(clipped, was_clipped)``; ``clipped = v · min(1, max_norm/||v||)`` is a new
    array/tensor of the same type, and ``was_clipped`` is True when the norm exceeded ``max_norm``.
    """
    c = _check_max_norm(max_norm)
    if _is_torch(v):
        import torch  # only for torch inputs: numpy callers never pay torch's import

        norm = float(torch.linalg.vector_norm(v.detach()))
        if norm > c:
            return v * (c / norm), True
        return v.clone(), False
    a = np.asarray(v)
    norm = float(np.linalg.norm(a.ravel()))
    if norm > c:
        return a * (c / norm), True
    return a.copy(), False


def clip_rows(x, max_norm: float):
    """Clip every item of a batch (first axis = items) to L2 norm ``max_norm``.

    The norm of an item is taken over all its remaining axes (Frobenius norm for matrices).
    Works for numpy arrays and torch tensors (no Python loop). Returns ``(clipped, n_clipped)``.
    """
    c = _check_max_norm(max_norm)
    if _is_torch(x):
        import torch  # only for torch inputs: numpy callers never pay torch's import

        if x.ndim == 0:
            raise ValueError("x must have at least one axis (items first)")
        flat = x.reshape(x.shape[0], -1)
        norms = torch.linalg.vector_norm(flat.detach(), dim=1)
        scale = torch.clamp(c / torch.clamp(norms, min=torch.finfo(norms.dtype).tiny), max=1.0)
        n_clipped = int((norms > c).sum())
        return x * scale.reshape((-1,) + (1,) * (x.ndim - 1)).to(x.dtype), n_clipped
    a = np.asarray(x)
    if a.ndim == 0:
        raise ValueError("x must have at least one axis (items first)")
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    norms = np.linalg.norm(a.reshape(a.shape[0], -1), axis=1)
    with np.errstate(divide="ignore"):
        scale = np.minimum(1.0, c / np.maximum(norms, np.finfo(np.float64).tiny))
    n_clipped = int(np.count_nonzero(norms > c))
    return (a * scale.reshape((-1,) + (1,) * (a.ndim - 1))).astype(a.dtype, copy=False), n_clipped


def add_gaussian_noise(x, std, rng: np.random.Generator):
    """Return ``x + N(0, std²)`` i.i.d. per entry; ``x`` is not modified.

    ``std`` is a scalar or an array broadcastable to ``x`` (e.g. one std per client row, shape
    ``(n, 1)``). ``rng`` is a numpy ``Generator`` (the run's ``"noise"`` stream). Torch tensors are
    accepted: the noise is drawn with ``rng`` in float64 and converted to ``x``'s dtype and device,
    so numpy and torch runs with the same seed add the same noise. ``std == 0`` adds nothing and
    draws nothing.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    std_arr = np.asarray(std, dtype=np.float64)
    if np.any(std_arr < 0) or not np.all(np.isfinite(std_arr)):
        raise ValueError(f"std must be finite and >= 0, got {std!r}")
    if _is_torch(x):
        import torch  # only for torch inputs: numpy callers never pay torch's import

        if not np.any(std_arr > 0):
            return x.clone()
        noise = rng.standard_normal(tuple(x.shape)) * std_arr
        return x + torch.as_tensor(noise, dtype=x.dtype, device=x.device)
    a = np.asarray(x)
    if not np.any(std_arr > 0):
        return a.copy()
    noise = rng.standard_normal(a.shape) * std_arr
    out = a + noise
    return out.astype(a.dtype, copy=False) if np.issubdtype(a.dtype, np.floating) else out


def classical_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classical Gaussian mechanism: ``σ = Δ·sqrt(2 ln(1.25/δ))/ε`` (Dwork & Roth, Thm A.1).

    Emits a :class:`PrivacyWarning` when ``ε ≥ 1``: the theorem is proved for ``ε < 1`` only
    (use :func:`analytic_sigma`, valid for all ε, instead).
    """
    e = check_epsilon(epsilon)
    d = check_delta(delta)
    s = check_positive(sensitivity, "sensitivity")
    if e >= 1.0:
        warnings.warn(
            f"classical Gaussian mechanism with epsilon={e:g} >= 1: the sigma formula "
            "sqrt(2 ln(1.25/delta))/epsilon is only proved for epsilon < 1; "
            "use analytic_sigma for a valid calibration",
            PrivacyWarning,
            stacklevel=2,
        )
    return s * math.sqrt(2.0 * math.log(1.25 / d)) / e


def analytic_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """The exact δ(ε) of a Gaussian mechanism with std ``sigma`` and L2 sensitivity Δ.

    Balle & Wang (2018), Thm 8: ``δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)``.
    """
    s = check_positive(sigma, "sigma")
    e = float(epsilon)
    if e < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    D = check_positive(sensitivity, "sensitivity")
    a = D / (2.0 * s) - e * s / D
    b = -D / (2.0 * s) - e * s / D
    return float(max(0.0, ndtr(a) - math.exp(e + float(log_ndtr(b)))))


def analytic_sigma(epsilon: float, delta: float, sensitivity: float = 1.0, *, rtol: float = 1e-12) -> float:
    """Smallest σ for which the Gaussian mechanism is (ε, δ)-DP: the analytic Gaussian mechanism.

    Balle & Wang (ICML 2018), Thm 8 (exact condition, see the module docstring). δ(σ) decreases
    in σ; the root is found by bisection on ``log σ`` and the returned σ is the upper end of the
    final bracket, so it always satisfies the condition. Valid for any ε > 0.
    """
    e = check_epsilon(epsilon)
    d = check_delta(delta)
    D = check_positive(sensitivity, "sensitivity")
    # unit sensitivity: delta depends on sigma/Delta only (the privacy layer's log bisection)
    return D * log_bisect(lambda sigma: analytic_delta(sigma, e) > d, rtol, min_value=1e-300)
