"""FedSC's own privacy formulas (Qiao, Ding & Fan, "Federated Spectral Clustering via Secure Similarity
Reconstruction", NeurIPS 2023: Proposition 3.7 and Theorem 3.9).

Sample-level DP, neighbouring datasets differ in one sample replaced (x -> x' in one client), all
sample norms bounded by ``tau_x`` (enforce by clipping, :func:`fedclust.privacy.mechanisms.clip_rows`).

Perturbed data (Proposition 3.7, proof in App. H). Each client releases ``X̃ = X + E``; the identity map
has L2 sensitivity ``||x - x'|| <= 2 tau_x``, so with the classical Gaussian mechanism (Dwork & Roth
Thm 3.22, ``c² > 2 ln(1.25/δ)``)::

    σ >= 2 c tau_x / ε,      σ_min = 2 sqrt(2 ln(1.25/δ)) tau_x / ε.

Perturbed factors (Theorem 3.9, Lemmas J.1/J.2, App. K/L). Noise on every uploaded Z_p for S rounds and on
C_p once at the end:

* sensitivity of one Z step (scalar GD step size eta)::

      Δ(g_Z) = (2 sqrt(d) tau_C tau_x eta / r²) (1 + (tau_x + tau_Z)(tau_x + Υ)/r²)

* S adaptive Gaussian releases of Z, Kairouz, Oh & Viswanath (2015) Thm 4.3 composition::

      σ_Z >= sqrt( 8 S Δ(g_Z)² log(e + ε_Z/δ_Z) / ε_Z² )

* sensitivity of C (ridge solve, ``||(K_zz + λI)^{-1}|| <= 1/λ``)::

      Δ(g_C) = 2 sqrt(d) tau_x (tau_x + Υ) / (λ r²),      σ_C >= c Δ(g_C)/ε_C,  c² > 2 ln(1.25/δ_C)

  (App. B eq. (36) misplaces a square root; the derivation, eq. (114), gives this form.)

* Basic composition: FedSC is (ε_Z + ε_C, δ_Z + δ_C)-DP.

These are the paper's claims, reported next to the accountant's ε. The runs are accounted with the
sensitivities of :func:`fedclust.clustering.fedsc.factor_sensitivities` instead (a per-sample bound:
the C-step is column-separable, so ``Δ_C = 2 tau_C`` for columns clipped to ``tau_C``, and each
sample's gradient term is bounded through ``K(a, b) ||a - b|| <= r e^{-1/2}``), which need no bound on
Z or on the data and no λ.

Υ is the ℓ2 bound ``max ||z_j - x'||_2`` (the proof's choice, conservative). The theorem
needs the plain GD Z step. The classical Gaussian formulas assume ε < 1;
:func:`perturbed_data_sigma` and :func:`factor_sigma_c` warn for ε >= 1 and offer
``mechanism="analytic"`` (Balle & Wang 2018), which is valid for any ε.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from fedclust.privacy._search import log_bisect
from fedclust.privacy._validate import check_delta, check_epsilon, check_positive, check_steps
from fedclust.privacy.events import GaussianRelease
from fedclust.privacy.mechanisms import PrivacyWarning, analytic_sigma

__all__ = [
    "MECHANISMS",
    "gaussian_constant",
    "perturbed_data_sigma",
    "perturbed_data_epsilon",
    "z_sensitivity",
    "c_sensitivity",
    "factor_sigma_z",
    "factor_epsilon_z",
    "factor_sigma_c",
    "factor_epsilon_c",
    "perturbed_factors_sigmas",
    "FactorBounds",
    "perturbed_data_release",
    "perturbed_factors_releases",
]

MECHANISMS = ("classical", "analytic")


def gaussian_constant(delta: float) -> float:
    """``c = sqrt(2 ln(1.25/δ))``: the classical Gaussian mechanism's constant (the infimum of the
    theorem's strict ``c² > 2 ln(1.25/δ)``)."""
    return math.sqrt(2.0 * math.log(1.25 / check_delta(delta)))


def _warn_eps(eps: float, what: str):
    if eps >= 1.0:
        warnings.warn(
            f"FedSC {what}: epsilon={eps:g} >= 1, outside the classical Gaussian mechanism's assumption "
            "(epsilon < 1); use mechanism='analytic' for a valid calibration",
            PrivacyWarning,
            stacklevel=3,
        )


def perturbed_data_sigma(epsilon: float, delta: float, tau_x: float, *, mechanism: str = "classical") -> float:
    """Proposition 3.7: noise std on the raw data, ``2 sqrt(2 ln(1.25/δ)) tau_x / ε`` (sensitivity 2 tau_x).

    ``mechanism="analytic"`` returns the analytic Gaussian σ for the same sensitivity instead.
    """
    e = check_epsilon(epsilon)
    d = check_delta(delta)
    t = check_positive(tau_x, "tau_x")
    if mechanism == "analytic":
        return analytic_sigma(e, d, 2.0 * t)
    if mechanism != "classical":
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    _warn_eps(e, "perturbed data (Prop. 3.7)")
    return 2.0 * gaussian_constant(d) * t / e


def perturbed_data_epsilon(sigma: float, delta: float, tau_x: float) -> float:
    """Proposition 3.7 forward: ``ε = 2 sqrt(2 ln(1.25/δ)) tau_x / σ`` (meaningful when it is < 1)."""
    return 2.0 * gaussian_constant(delta) * check_positive(tau_x, "tau_x") / check_positive(sigma, "sigma")


def z_sensitivity(*, tau_x: float, tau_c: float, tau_z: float, upsilon: float, r: float, d: int, eta: float) -> float:
    """Lemma J.2: ``Δ(g_Z) = (2 sqrt(d) tau_C tau_x eta / r²)(1 + (tau_x + tau_Z)(tau_x + Υ)/r²)``."""
    tx = check_positive(tau_x, "tau_x")
    tc = check_positive(tau_c, "tau_c")
    tz = check_positive(tau_z, "tau_z")
    up = check_positive(upsilon, "upsilon")
    r2 = check_positive(r, "r") ** 2
    dd = check_positive(d, "d")
    et = check_positive(eta, "eta")
    return (2.0 * math.sqrt(dd) * tc * tx * et / r2) * (1.0 + (tx + tz) * (tx + up) / r2)


def c_sensitivity(*, tau_x: float, upsilon: float, r: float, d: int, lam: float) -> float:
    """Lemma J.1 / eq. (114): ``Δ(g_C) = 2 sqrt(d) tau_x (tau_x + Υ) / (λ r²)``."""
    tx = check_positive(tau_x, "tau_x")
    up = check_positive(upsilon, "upsilon")
    r2 = check_positive(r, "r") ** 2
    dd = check_positive(d, "d")
    lm = check_positive(lam, "lam")
    return 2.0 * math.sqrt(dd) * tx * (tx + up) / (lm * r2)


def factor_sigma_z(epsilon_z: float, delta_z: float, rounds: int, sensitivity_z: float) -> float:
    """Theorem 3.9 (Kairouz et al. 2015 composition of S Gaussians):
    ``σ_Z = sqrt(8 S Δ_Z² log(e + ε_Z/δ_Z) / ε_Z²)``."""
    e = check_epsilon(epsilon_z, "epsilon_z")
    d = check_delta(delta_z, "delta_z")
    S = check_steps(rounds, "rounds")
    D = check_positive(sensitivity_z, "sensitivity_z")
    return math.sqrt(8.0 * S * D * D * math.log(math.e + e / d) / (e * e))


def factor_epsilon_z(
    sigma_z: float, delta_z: float, rounds: int, sensitivity_z: float, *, rtol: float = 1e-12
) -> float:
    """Theorem 3.9 forward: the ε_Z that σ_Z certifies, solving ``σ_Z² = 8 S Δ² log(e + ε/δ)/ε²`` for ε.

    The right-hand side decreases strictly in ε, so the root is unique; bisection on log ε.
    """
    s = check_positive(sigma_z, "sigma_z")
    d = check_delta(delta_z, "delta_z")
    S = check_steps(rounds, "rounds")
    D = check_positive(sensitivity_z, "sensitivity_z")

    def need(e):  # sigma required for epsilon e
        return math.sqrt(8.0 * S * D * D * math.log(math.e + e / d)) / e

    return log_bisect(lambda e: need(e) > s, rtol)


def factor_sigma_c(epsilon_c: float, delta_c: float, sensitivity_c: float, *, mechanism: str = "classical") -> float:
    """Theorem 3.9: ``σ_C = sqrt(2 ln(1.25/δ_C)) Δ_C / ε_C`` (or the analytic Gaussian σ)."""
    e = check_epsilon(epsilon_c, "epsilon_c")
    d = check_delta(delta_c, "delta_c")
    D = check_positive(sensitivity_c, "sensitivity_c")
    if mechanism == "analytic":
        return analytic_sigma(e, d, D)
    if mechanism != "classical":
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    _warn_eps(e, "perturbed factors, C (Thm 3.9)")
    return gaussian_constant(d) * D / e


def factor_epsilon_c(sigma_c: float, delta_c: float, sensitivity_c: float) -> float:
    """Theorem 3.9 forward for C: ``ε_C = sqrt(2 ln(1.25/δ_C)) Δ_C / σ_C``."""
    return (
        gaussian_constant(delta_c) * check_positive(sensitivity_c, "sensitivity_c") / check_positive(sigma_c, "sigma_c")
    )


@dataclass(frozen=True)
class FactorBounds:
    """The constants of Theorem 3.9's sensitivities: the clips ``tau_x`` (rows), ``tau_c`` (columns of
    C), ``tau_z`` (dictionaries), the bound ``upsilon``, the kernel width ``r``, the dictionary size
    ``d``, the ridge weight ``lam`` and the Z step ``eta``."""

    tau_x: float
    tau_c: float
    tau_z: float
    upsilon: float
    r: float
    d: int
    lam: float
    eta: float


def perturbed_factors_sigmas(
    epsilon_z: float,
    delta_z: float,
    epsilon_c: float,
    delta_c: float,
    *,
    rounds: int,
    bounds: FactorBounds,
    mechanism_c: str = "classical",
) -> dict:
    """Theorem 3.9 in one call: sensitivities (from ``bounds``), ``sigma_z``, ``sigma_c`` and the total
    (ε, δ) by basic composition.

    Returns a dict with keys ``sigma_z, sigma_c, sensitivity_z, sensitivity_c, epsilon, delta``.
    """
    b = bounds
    dz = z_sensitivity(tau_x=b.tau_x, tau_c=b.tau_c, tau_z=b.tau_z, upsilon=b.upsilon, r=b.r, d=b.d, eta=b.eta)
    dc = c_sensitivity(tau_x=b.tau_x, upsilon=b.upsilon, r=b.r, d=b.d, lam=b.lam)
    sz = factor_sigma_z(epsilon_z, delta_z, rounds, dz)
    sc = factor_sigma_c(epsilon_c, delta_c, dc, mechanism=mechanism_c)
    return {
        "sigma_z": sz,
        "sigma_c": sc,
        "sensitivity_z": dz,
        "sensitivity_c": dc,
        "epsilon": float(epsilon_z) + float(epsilon_c),
        "delta": float(delta_z) + float(delta_c),
    }


def perturbed_data_release(sigma: float, tau_x: float, label: str = "fedsc_data") -> GaussianRelease:
    """The one release of Proposition 3.7 (noise multiplier ``σ/(2 tau_x)``, replace-one, sample level)."""
    z = check_positive(sigma, "sigma") / (2.0 * check_positive(tau_x, "tau_x"))
    return GaussianRelease((z,), count=1, neighbouring="replace_one", unit="sample", label=label)


def perturbed_factors_releases(
    sigma_z: float, sensitivity_z: float, rounds: int, sigma_c: float, sensitivity_c: float
) -> list[GaussianRelease]:
    """The releases of Theorem 3.9: ``rounds`` Z uploads and one C upload (replace-one, sample level).

    Each sample lives on one client, so only that client's Z_p and C_p change between neighbours.
    """
    return [
        GaussianRelease(
            (check_positive(sigma_z, "sigma_z") / check_positive(sensitivity_z, "sensitivity_z"),),
            count=check_steps(rounds, "rounds"),
            neighbouring="replace_one",
            unit="sample",
            label="fedsc_Z",
        ),
        GaussianRelease(
            (check_positive(sigma_c, "sigma_c") / check_positive(sensitivity_c, "sensitivity_c"),),
            count=1,
            neighbouring="replace_one",
            unit="sample",
            label="fedsc_C",
        ),
    ]
