"""DP-FedC's own privacy formulas (Li, Wang, Chi & Quek, "Differentially Private Federated Clustering
Over Non-IID Data", IEEE IoT-J 2023: Theorems 1-3).

Sample-level (ε, δ)-DP of each client's uploaded centroid matrix W̃_i^t = W_i^t + ξ_i^t.

* Sensitivity, Lemma 2 eq. (28): ``s = 2 G Q2 / eta`` (G: the Frobenius clip of every minibatch
  gradient; Q2: local W-steps; eta: the W step-size denominator).
* Per-round noise, Theorem 2 eq. (29), valid for q < 1/2 (amplification by subsampling, Theorem 1,
  eq. (5): ε' = 2 q ε, δ' = q δ)::

      σ² = 32 G² Q2² q² ln(1.25 q/δ) / (η² ε²)

  i.e. ``σ / (G Q2/η) = sqrt(32 q² ln(1.25 q/δ)) / ε`` (q = 0.5, δ = 1e-4: 8.36/ε). Eq. (31) has a
  typo (4 for 8); (29) is consistent with (28) and (30) and is what we use.
  Our choice: for q ≥ 1/2 there is no amplification and the un-amplified Gaussian of eq. (30),
  ``σ² = 8 G² Q2² ln(1.25/δ)/(η² ε²)``, is used instead, with a note. A note is also returned when the
  base mechanism's ε/(2q) exceeds 1 (Lemma 1 / Theorem 1 assume ε ≤ 1).
* Total loss, Theorem 3 eq. (32): ``ε̄ = c0 q² ε sqrt(p R/(1 - q))``; inverted to get the per-round
  ε from a total budget: ``ε = ε̄ sqrt(1 - q)/(c0 q² sqrt(p R))``. c0 is never given (default 1),
  and q is capped at ``q_cap = 0.99`` so that 1 - q stays positive.

These formulas set the noise; they are not the reported ε. The accountant rates the
releases (:func:`release`: noise multiplier σ/s per round, fixed-size subsampling, replace-one) for
every client size, and a run reports the worst client's ε (``clustering.dp_fedc.client_privacy``).
Eq. (28) is a valid sensitivity only when η is public (every clipped step then moves W by at most
G/η whatever the data); ``clustering.dp_fedc`` sets η, ρ and μ_h from public quantities in a private
run, and reports ε = ∞ for the paper's data-dependent constants.
"""

from __future__ import annotations

import math

from fedclust.privacy._validate import check_delta, check_epsilon, check_positive, check_rate, check_steps
from fedclust.privacy.events import GaussianRelease

__all__ = [
    "sensitivity",
    "eq29_factor",
    "sigma_factor",
    "sigma_round",
    "round_epsilon",
    "total_epsilon",
    "effective_q",
    "release",
]


def sensitivity(G: float, Q2: float, eta: float) -> float:
    """Lemma 2, eq. (28): ``s = 2 G Q2 / eta``."""
    return 2.0 * check_positive(G, "G") * check_positive(Q2, "Q2") / check_positive(eta, "eta")


def effective_q(Q2: int, b: int, n_i: int, q_cap: float = 0.99) -> float:
    """The data sampling ratio ``q = min(Q2 b / n_i, q_cap)`` (the minibatch share of the client's samples in one round, capped below 1)."""
    if not 0 < q_cap <= 1:
        raise ValueError(f"q_cap must be in (0, 1], got {q_cap!r}")
    return min(check_positive(Q2, "Q2") * check_positive(b, "b") / check_positive(n_i, "n_i"), q_cap)


def eq29_factor(epsilon: float, delta: float, q: float) -> float:
    """Eq. (29) literally, in units of ``G Q2/η``: ``sqrt(32 q² ln(1.25 q/δ)) / ε`` (no fallback)."""
    e = check_epsilon(epsilon)
    d = check_delta(delta)
    q = check_rate(q, "q")
    if 1.25 * q / d <= 1.0:
        raise ValueError(f"eq. (29) needs ln(1.25 q/delta) > 0, i.e. q > delta/1.25; got q={q}, delta={d}")
    return math.sqrt(32.0 * q * q * math.log(1.25 * q / d)) / e


def sigma_factor(epsilon: float, delta: float, q: float, *, fallback: bool = True) -> tuple[float, str | None]:
    """σ in units of ``G Q2/η``: eq. (29) ``sqrt(32 q² ln(1.25 q/δ))/ε`` for q < 1/2, else (with
    ``fallback``, our choice) ``sqrt(8 ln(1.25/δ))/ε``, the un-amplified eq. (30) with s from (28).
    ``fallback=False`` applies eq. (29) for every q (paper-literal). Returns ``(factor, note)``."""
    e = check_epsilon(epsilon)
    d = check_delta(delta)
    q = check_rate(q, "q")
    notes = []
    if q < 0.5 or not fallback:
        f = eq29_factor(e, d, q)
        if q >= 0.5:
            notes.append(f"q = {q:.4g} >= 1/2: eq. (29) applied without amplification being valid (Theorem 1)")
        if e / (2.0 * q) > 1.0:
            notes.append(
                f"the base mechanism's epsilon/(2q) = {e / (2 * q):.4g} > 1: Theorem 2 (via Lemma 1 and "
                "Theorem 1) assumes it is <= 1, so eq. (29) is applied outside its assumptions"
            )
    else:
        f = math.sqrt(8.0 * math.log(1.25 / d)) / e
        notes.append(
            f"q = {q:.4g} >= 1/2: no amplification by subsampling (Theorem 1); the un-amplified Gaussian "
            "sigma^2 = 8 G^2 Q2^2 ln(1.25/delta)/(eta^2 eps^2) is used instead of eq. (29)"
        )
        if e > 1.0:
            notes.append(f"epsilon = {e:.4g} > 1: the classical Gaussian mechanism (Lemma 1) assumes epsilon <= 1")
    return f, ("; ".join(notes) if notes else None)


def sigma_round(
    G: float, Q2: float, eta: float, epsilon: float, delta: float, q: float, *, fallback: bool = True
) -> tuple[float, str | None]:
    """Per-round noise std of Theorem 2, eq. (29), with the q ≥ 1/2 fallback unless ``fallback=False``.

    Returns ``(sigma, note)``; ``note`` is None when the formula is applied within its assumptions,
    else a sentence saying why not (for the run's log and privacy report; no warning is raised
    because this is called every round).
    """
    f, note = sigma_factor(epsilon, delta, q, fallback=fallback)
    sigma = f * check_positive(G, "G") * check_positive(Q2, "Q2") / check_positive(eta, "eta")
    return sigma, note


def round_epsilon(eps_bar: float, q: float, p: float, R: int, c0: float = 1.0, q_cap: float = 0.99) -> float:
    """Per-round ε from the total budget ε̄: Theorem 3 eq. (32) inverted,
    ``ε = ε̄ sqrt(1 - q) / (c0 q² sqrt(p R))`` with ``q ← min(q, q_cap)``."""
    eb = check_epsilon(eps_bar, "eps_bar")
    q = min(check_rate(q, "q"), _check_qcap(q_cap))
    p = check_rate(p, "p")
    R = check_steps(R, "R")
    c0 = check_positive(c0, "c0")
    return eb * math.sqrt(1.0 - q) / (c0 * q * q * math.sqrt(p * R))


def total_epsilon(epsilon: float, q: float, p: float, R: int, c0: float = 1.0, q_cap: float = 0.99) -> float:
    """Theorem 3 eq. (32): ``ε̄ = c0 q² ε sqrt(p R / (1 - q))`` with ``q ← min(q, q_cap)``."""
    e = check_epsilon(epsilon)
    q = min(check_rate(q, "q"), _check_qcap(q_cap))
    p = check_rate(p, "p")
    R = check_steps(R, "R")
    c0 = check_positive(c0, "c0")
    return c0 * q * q * e * math.sqrt(p * R / (1.0 - q))


def _check_qcap(q_cap: float) -> float:
    if not 0.0 < float(q_cap) < 1.0:
        raise ValueError(f"q_cap must be in (0, 1), got {q_cap!r}")
    return float(q_cap)


def release(sigma: float, sens: float, *, rounds: int, n_i: int, batch: int, label: str = "dp_fedc") -> GaussianRelease:
    """A per-client :class:`GaussianRelease` for the accountant: ``rounds`` uploads of W̃ with noise
    multiplier ``sigma/sens``, the record sampled without replacement (``batch`` = Q2 b of ``n_i``).

    Sample-level DP, replace-one neighbours (Definition 1: datasets differing in one sample; the
    sensitivity of eq. (28) is a replace-one bound). Client sampling (p = K/N) is ignored, which is
    conservative. Use ``batch = n_i`` (no amplification) when Q2 b >= n_i.
    """
    z = check_positive(sigma, "sigma") / check_positive(sens, "sens")
    m = int(min(batch, n_i))
    return GaussianRelease(
        (z,),
        count=check_steps(rounds, "rounds"),
        sampling="without_replacement",
        population=int(n_i),
        sample_size=m,
        neighbouring="replace_one",
        unit="sample",
        label=label,
    )
