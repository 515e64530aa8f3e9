"""Empirical privacy auditing with canaries: a statistical *lower* bound on the ε a mechanism spends.

An accountant gives an upper bound on ε for the releases a method *says* it makes. An audit checks
the code instead: it runs the private mechanism many times on two neighbouring inputs, one with a
canary (an extreme sample or client) and one without, applies a distinguisher to what is released,
and turns the distinguisher's true- and false-positive rates into a lower bound on ε that holds
with confidence ``1 - alpha``. If the code leaks more than the accountant says (a raw row released
as a centroid, a noise scale set by the data, a sampling assumption that does not hold), the lower
bound climbs above the accounted ε; if the mechanism is sound, it cannot (up to the ``alpha`` risk).

The bound (Kairouz, Oh & Viswanath 2015; Jagielski, Ullman & Oprea 2020). For an (ε, δ)-DP
mechanism and any test that says "canary present" with rates TPR (canary present) and FPR (absent),

    TPR <= e^ε FPR + δ      and      1 - FPR <= e^ε (1 - TPR) + δ,

so ``ε >= max(ln((TPR - δ)/FPR), ln((1 - FPR - δ)/(1 - TPR)))``. We replace TPR by its one-sided
Clopper-Pearson lower bound and FPR by its upper bound, each at level ``alpha/2`` (Bonferroni), so
the returned ε is a lower bound with probability at least ``1 - alpha``.

The test is a threshold on a scalar score (higher means "canary present"). The threshold is chosen
on one half of the runs (the calibration half) and the rates are measured on the other half, so the
choice does not bias the bound.

Power. An audit that can never find anything proves nothing. :func:`audit_case` is also run with
the noise switched off: the same mechanism, the same canary and the same distinguisher must then
give a lower bound above the accounted ε (:attr:`AuditReport.powerful`). With ``n`` evaluation runs
per side the largest reachable bound is about ``ln(n / 3.7)`` (``alpha = 0.05``), e.g. 4.9 for 500,
so audits use budgets of ε ≈ 1-2.

An :class:`AuditCase` describes one method's audit: ``scores(with_canary, noise, n_runs, seed)``
returns one distinguisher score per independent run. The method families register their cases in
:mod:`fedclust.privacy.audits`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = [
    "AuditCase",
    "AuditResult",
    "AuditReport",
    "clopper_pearson",
    "epsilon_lower_bound",
    "epsilon_lower_bound_from_scores",
    "audit_case",
    "seeded_scores",
]


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds at level ``alpha`` each: ``(lower, upper)`` for a binomial
    proportion with ``k`` successes in ``n`` trials (``P(p < lower) <= alpha``, ``P(p > upper) <= alpha``)."""
    from scipy.stats import beta

    k, n = int(k), int(n)
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lo = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - alpha, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(tp: int, n_in: int, fp: int, n_out: int, delta: float, alpha: float = 0.05) -> float:
    """ε lower bound (confidence ``1 - alpha``) from a test's counts: ``tp`` of ``n_in`` canary runs
    and ``fp`` of ``n_out`` canary-free runs flagged "canary present" (module docstring)."""
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    tpr_lo, _ = clopper_pearson(tp, n_in, alpha / 2.0)
    _, fpr_hi = clopper_pearson(fp, n_out, alpha / 2.0)
    best = 0.0
    if tpr_lo - delta > 0 and fpr_hi > 0:
        best = max(best, math.log((tpr_lo - delta) / fpr_hi))
    tnr_lo, fnr_hi = 1.0 - fpr_hi, 1.0 - tpr_lo
    if tnr_lo - delta > 0 and fnr_hi > 0:
        best = max(best, math.log((tnr_lo - delta) / fnr_hi))
    return best


def _best_threshold(s_in: np.ndarray, s_out: np.ndarray, delta: float, alpha: float) -> float:
    """The threshold (flag "present" when score >= t) with the largest bound on these scores."""
    cand = np.unique(np.concatenate([s_in, s_out]))
    if cand.size > 400:  # quantiles keep the search cheap and still fine-grained
        cand = np.unique(np.quantile(cand, np.linspace(0, 1, 400)))
    a_in, a_out = np.sort(s_in), np.sort(s_out)
    best_t, best_eps = float(cand[0]), -1.0
    for t in cand:
        tp = a_in.size - int(np.searchsorted(a_in, t, side="left"))
        fp = a_out.size - int(np.searchsorted(a_out, t, side="left"))
        e = epsilon_lower_bound(tp, a_in.size, fp, a_out.size, delta, alpha)
        if e > best_eps:
            best_t, best_eps = float(t), e
    return best_t


def epsilon_lower_bound_from_scores(scores_in, scores_out, delta: float, alpha: float = 0.05) -> dict:
    """ε lower bound from distinguisher scores of runs with (``scores_in``) and without the canary.

    The first half of each array picks the threshold, the second half measures the rates. Returns
    ``{"epsilon_lower", "threshold", "tpr", "fpr", "n_eval_in", "n_eval_out"}``.
    """
    s_in = np.asarray(scores_in, dtype=np.float64).ravel()
    s_out = np.asarray(scores_out, dtype=np.float64).ravel()
    if s_in.size < 4 or s_out.size < 4:
        raise ValueError("need at least 4 runs with and 4 without the canary")
    if not (np.isfinite(s_in).all() and np.isfinite(s_out).all()):
        raise ValueError("distinguisher scores must be finite")
    h_in, h_out = s_in.size // 2, s_out.size // 2
    t = _best_threshold(s_in[:h_in], s_out[:h_out], delta, alpha)
    e_in, e_out = s_in[h_in:], s_out[h_out:]
    tp, fp = int((e_in >= t).sum()), int((e_out >= t).sum())
    return {
        "epsilon_lower": epsilon_lower_bound(tp, e_in.size, fp, e_out.size, delta, alpha),
        "threshold": t,
        "tpr": tp / e_in.size,
        "fpr": fp / e_out.size,
        "n_eval_in": int(e_in.size),
        "n_eval_out": int(e_out.size),
    }


def seeded_scores(one_run: Callable[[int], float], n_runs: int, seed: int) -> np.ndarray:
    """``n_runs`` scores of ``one_run(run_seed)`` with distinct, reproducible run seeds derived from
    ``seed`` (for mechanisms that are cheap enough to run one at a time)."""
    seeds = np.random.SeedSequence(int(seed)).generate_state(int(n_runs), dtype=np.uint32)
    return np.array([float(one_run(int(s))) for s in seeds])


@dataclass(frozen=True)
class AuditCase:
    """One method's canary audit.

    * ``scores(with_canary, noise, n_runs, seed)``: one distinguisher score per independent run of
      the private mechanism on the input with or without the canary; ``noise=False`` runs the same
      mechanism with its noise switched off (the power check). Higher means "canary present".
    * ``epsilon``: the accountant's ε for exactly the audited configuration (from the releases
      the method reports), at ``delta``.
    """

    name: str
    method: str
    scores: Callable[[bool, bool, int, int], np.ndarray]
    epsilon: float
    delta: float
    n_runs: int = 1000
    description: str = ""
    info: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class AuditResult:
    name: str
    method: str
    noise: bool
    epsilon_accounted: float
    epsilon_lower: float
    delta: float
    alpha: float
    n_runs: int
    threshold: float
    tpr: float
    fpr: float
    seconds: float

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class AuditReport:
    """The audit of one case with the noise on and off."""

    case: AuditCase
    noisy: AuditResult
    noise_off: AuditResult | None

    @property
    def sound(self) -> bool:
        """The noisy mechanism's lower bound stays at or below the accounted ε."""
        return self.noisy.epsilon_lower <= self.case.epsilon

    @property
    def powerful(self) -> bool | None:
        """The noise-off bound exceeds the accounted ε (the audit could have caught a leak)."""
        return None if self.noise_off is None else self.noise_off.epsilon_lower > self.case.epsilon

    def to_dict(self) -> dict:
        from fedclust.privacy.report import json_ready

        return json_ready({
            "name": self.case.name,
            "method": self.case.method,
            "description": self.case.description,
            "delta": self.case.delta,
            "epsilon_accounted": self.case.epsilon,
            "epsilon_audited": self.noisy.epsilon_lower,
            "epsilon_audited_noise_off": None if self.noise_off is None else self.noise_off.epsilon_lower,
            "sound": self.sound,
            "powerful": self.powerful,
            "n_runs": self.noisy.n_runs,
            "noisy": self.noisy.to_dict(),
            "noise_off": None if self.noise_off is None else self.noise_off.to_dict(),
            "info": dict(self.case.info),
        })


def _run(case: AuditCase, noise: bool, n_runs: int, seed: int, alpha: float) -> AuditResult:
    t0 = time.perf_counter()
    ss = np.random.SeedSequence([int(seed), 1 if noise else 0]).generate_state(2, dtype=np.uint32)
    s_in = np.asarray(case.scores(True, noise, n_runs, int(ss[0])), dtype=np.float64)
    s_out = np.asarray(case.scores(False, noise, n_runs, int(ss[1])), dtype=np.float64)
    if s_in.shape != (n_runs,) or s_out.shape != (n_runs,):
        raise ValueError(f"audit case {case.name!r}: scores must return shape ({n_runs},), got {s_in.shape}, {s_out.shape}")
    r = epsilon_lower_bound_from_scores(s_in, s_out, case.delta, alpha)
    return AuditResult(
        name=case.name, method=case.method, noise=noise, epsilon_accounted=float(case.epsilon),
        epsilon_lower=r["epsilon_lower"], delta=case.delta, alpha=alpha, n_runs=n_runs,
        threshold=r["threshold"], tpr=r["tpr"], fpr=r["fpr"], seconds=time.perf_counter() - t0,
    )


def audit_case(case: AuditCase, *, n_runs: int | None = None, seed: int = 0, alpha: float = 0.05,
               power_check: bool = True) -> AuditReport:
    """Audit ``case``: ``n_runs`` runs with and without the canary, noise on (and off when
    ``power_check``). Returns an :class:`AuditReport` (``sound``, ``powerful``, ``to_dict()``)."""
    n = int(case.n_runs if n_runs is None else n_runs)
    if n < 8:
        raise ValueError(f"n_runs must be >= 8, got {n}")
    noisy = _run(case, True, n, seed, alpha)
    off = _run(case, False, n, seed, alpha) if power_check else None
    return AuditReport(case=case, noisy=noisy, noise_off=off)
