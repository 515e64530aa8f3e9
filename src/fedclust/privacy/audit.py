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
:mod:`fedclust.audits`.

The tight audit (:func:`gaussian_audit`). The distribution-free bound above needs many runs to get
near the accounted ε: it estimates tail probabilities. Where the release is Gaussian, a case can
also return a *Gaussian statistic*: a linear function of the released, noised values whose
distribution is ``N(a, s^2)`` without the canary and ``N(a + shift, s^2)`` with it (the same ``s``).
The audit then estimates the noise scale actually applied (``s``, with a chi-square upper
confidence bound) and the shift the canary causes (with a t lower confidence bound), takes
``mu = shift / s`` at the conservative ends (confidence ``1 - alpha`` for both together), and
reports the ε of ``mu``-Gaussian-DP at the case's δ (Dong, Roth & Su 2022). It is a lower bound on
what the mechanism spends only under that Gaussian model, so it applies to cases whose statistic is
exactly a Gaussian release (a case says so with ``gaussian=True``); for others only the
distribution-free bound is reported. ``tightness = ε_tight / ε_accounted``.

The measured-noise audit (:func:`noise_audit`). The tight audit measures what one canary reveals,
so it is only as strong as the canary (a canary that moves the release by less than the
sensitivity, or a statistic that sees one of several releases, reads low). A case whose noise is
Gaussian can also return a *noise residual*: released values whose noise-free value is the same in
every run of a side (for example a released total minus the exact total, or a difference of two
coordinates the canary moves alike), with the standard deviation the method claims for it
(``AuditCase.noise_std``, from the calibrated noise). The audit takes the chi-square upper
confidence bound of the residual's standard deviation, divides it by the claimed one (``ratio``,
about 1 when the code adds the noise it accounts) and reports the accountant's ε for the case's
releases with every noise multiplier multiplied by that ratio (``AuditCase.epsilon_at_noise``). It
checks the noise, not the sensitivity (that is the canary audits' job): with the claimed noise it
stays below the accounted ε with probability ``1 - noise_alpha`` (:data:`NOISE_ALPHA`, smaller
than ``alpha``: this bound has no slack but the std's sampling error); with half of it, it reports
the ε of half the noise, far above the claim, from a few hundred runs.

The mutant. A case factory's ``noise_scale`` (test-side only: no user configuration reaches it)
runs the method with that fraction of its calibrated noise while the case keeps the claim of the
unmutated run. :func:`audit_case` audits such a case as ``mutant`` and calls it caught when any of
its bounds (distribution-free, tight, measured-noise) exceeds the claim: an audit that cannot see a
run with half its noise is not worth much.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np
from scipy.stats import beta, chi2, norm
from scipy.stats import t as student_t

from fedclust.privacy._search import log_bisect
from fedclust.privacy.accountants import epsilon as accounted_epsilon
from fedclust.privacy.report import json_ready

__all__ = [
    "AuditCase",
    "AuditResult",
    "AuditReport",
    "clopper_pearson",
    "epsilon_lower_bound",
    "epsilon_lower_bound_from_scores",
    "audit_case",
    "seeded_scores",
    "gaussian_dp_epsilon",
    "gaussian_audit",
    "noise_audit",
    "epsilon_with_noise",
    "NOISE_ALPHA",
]


#: Confidence risk of the measured-noise bound. A sound mechanism's bound sits at its claim but for
#: the sampling error of the std, so at ``alpha = 0.05`` one audit in twenty would flag a correct
#: method (the privacy_audit pipeline runs 28); at 1e-3 its noise bound is still within a few
#: percent of the measured std at the default run counts, and half the noise stays far above.
NOISE_ALPHA = 1e-3


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds at level ``alpha`` each: ``(lower, upper)`` for a binomial
    proportion with ``k`` successes in ``n`` trials (``P(p < lower) <= alpha``, ``P(p > upper) <= alpha``)."""

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


def distribution_free_ceiling(n_runs: int, delta: float, alpha: float = 0.05) -> float:
    """The largest distribution-free bound ``n_runs`` runs per side can give: the bound of a perfect
    separation of the evaluation halves (:func:`epsilon_lower_bound_from_scores` picks the
    threshold on the first halves). A bound can only show a leak of more than this with more runs."""
    h = int(n_runs) - int(n_runs) // 2
    return epsilon_lower_bound(h, h, 0, h, delta, alpha)


def runs_for_power(epsilon: float, delta: float, alpha: float, start: int, most: int) -> int:
    """Runs per side for the noise-off audit: ``start`` doubled until the distribution-free ceiling
    exceeds ``POWER_MARGIN`` times ``epsilon`` (so a perfect separation with the noise off shows the
    audit could catch a leak beyond the claim), at most ``most``."""
    n = max(int(start), 8)
    while distribution_free_ceiling(n, delta, alpha) <= POWER_MARGIN * epsilon and n < most:
        n = min(2 * n, int(most))
    return n


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


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with ``mu``-Gaussian-DP implying (ε, ``delta``)-DP: the root of
    ``Phi(-ε/mu + mu/2) - e^ε Phi(-ε/mu - mu/2) = delta`` (0 when ``mu`` is too small to need any;
    inf for ``mu >= 50``)."""

    mu = float(mu)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not mu > 0:
        return 0.0
    if not mu < 50.0:  # mu >= 50 (e.g. a noise-free statistic): eps > 1000, beyond any budget; inf
        return math.inf

    def excess(eps):
        # e^eps Phi(.) in log space: no overflow for a large eps
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)) - delta

    if excess(0.0) <= 0:
        return 0.0
    # the excess decreases in eps: the privacy layer's log bisection, to 1e-10 relative
    return float(log_bisect(lambda eps: excess(eps) > 0, 1e-10))


def gaussian_audit(stat_in, stat_out, delta: float, alpha: float = 0.05) -> dict:
    """The tight audit of a Gaussian statistic (module docstring), confidence ``1 - alpha``.

    Returns ``{"epsilon_lower", "epsilon_point", "mu_lower", "mu_point", "shift", "shift_lower",
    "sigma", "sigma_upper"}``: ε of ``mu``-GDP at ``delta`` for ``mu`` at the conservative ends of the
    intervals (``alpha/2`` each) and at the point estimates."""

    a = np.asarray(stat_in, dtype=np.float64).ravel()
    b = np.asarray(stat_out, dtype=np.float64).ravel()
    if a.size < 4 or b.size < 4:
        raise ValueError("need at least 4 runs with and 4 without the canary")
    dof = a.size + b.size - 2
    var = (np.square(a - a.mean()).sum() + np.square(b - b.mean()).sum()) / dof  # pooled: one noise scale
    sd = math.sqrt(var)
    shift = float(a.mean() - b.mean())
    shift_lo = shift - float(student_t.ppf(1 - alpha / 2, dof)) * sd * math.sqrt(1 / a.size + 1 / b.size)
    sd_hi = math.sqrt(dof * var / float(chi2.ppf(alpha / 2, dof)))
    mu_lo = max(shift_lo, 0.0) / sd_hi if sd_hi > 0 else (math.inf if shift_lo > 0 else 0.0)
    mu_pt = abs(shift) / sd if sd > 0 else (math.inf if shift else 0.0)
    return {
        "epsilon_lower": gaussian_dp_epsilon(mu_lo, delta),
        "epsilon_point": gaussian_dp_epsilon(mu_pt, delta),
        "mu_lower": mu_lo,
        "mu_point": mu_pt,
        "shift": shift,
        "shift_lower": shift_lo,
        "sigma": sd,
        "sigma_upper": sd_hi,
    }


def noise_audit(res_in, res_out, noise_std: float, alpha: float = 0.05) -> dict:
    """The measured noise of a residual (module docstring), confidence ``1 - alpha``.

    ``res_in`` / ``res_out``: shape ``(n,)`` or ``(n, p)``, one row per run; each column's noise-free
    value is the same in every run of a side, its noise has the claimed std ``noise_std``, and the
    entries are independent. The variance is pooled around the per-side, per-column means. Returns
    ``{"sigma", "sigma_upper", "sigma_claimed", "ratio", "ratio_upper", "dof"}``."""

    if not noise_std > 0:
        raise ValueError(f"noise_std must be > 0, got {noise_std}")
    a = np.asarray(res_in, dtype=np.float64)
    b = np.asarray(res_out, dtype=np.float64)
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    if a.shape[0] < 4 or b.shape[0] < 4 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need at least 4 runs per side and the same columns, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("noise residuals must be finite")
    dof = (a.shape[0] - 1) * a.shape[1] + (b.shape[0] - 1) * b.shape[1]
    ss = float(np.square(a - a.mean(0)).sum() + np.square(b - b.mean(0)).sum())
    var = ss / dof
    sd_hi = math.sqrt(ss / float(chi2.ppf(alpha, dof)))
    return {
        "sigma": math.sqrt(var),
        "sigma_upper": sd_hi,
        "sigma_claimed": float(noise_std),
        "ratio": math.sqrt(var) / noise_std,
        "ratio_upper": sd_hi / noise_std,
        "dof": int(dof),
    }


def epsilon_with_noise(releases, delta: float, ratio: float, accountant: str = "rdp") -> float:
    """The accountant's ε of ``releases`` with every noise multiplier multiplied by ``ratio``: what
    the releases spend if the code adds ``ratio`` times the noise it reports (0 noise: inf)."""
    if not ratio > 0:
        return math.inf
    rels = releases if isinstance(releases, (list, tuple)) else [releases]
    scaled = [replace(r, noise_multipliers=tuple(z * ratio for z in r.noise_multipliers)) for r in rels]
    return float(accounted_epsilon(scaled, delta, accountant))


def seeded_scores(one_run: Callable[[int], float], n_runs: int, seed: int) -> np.ndarray:
    """``n_runs`` scores of ``one_run(run_seed)`` with distinct, reproducible run seeds derived from
    ``seed`` (for mechanisms that are cheap enough to run one at a time)."""
    seeds = np.random.SeedSequence(int(seed)).generate_state(int(n_runs), dtype=np.uint32)
    return np.array([float(one_run(int(s))) for s in seeds])


#: the noise-off audit's runs are raised until the distribution-free ceiling is this times the claim
POWER_MARGIN = 1.1
#: the most runs per side :func:`audit_case` gives the noise-off audit for distribution-free power
#: (noise-off runs are cheap: no noise to draw, and a case's own ``power_runs_max`` can lower it)
POWER_RUNS_MAX = 4000


@dataclass(frozen=True)
class AuditCase:
    """One method's canary audit.

    * ``scores(with_canary, noise, n_runs, seed)``: one distinguisher score per independent run of
      the private mechanism on the input with or without the canary; ``noise=False`` runs the same
      mechanism with its noise switched off (the power check). Higher means "canary present".
    * ``epsilon``: the accountant's ε for exactly the audited configuration (from the releases
      the method reports), at ``delta``.
    * ``gaussian``: the case has a Gaussian statistic for the tight audit: ``scores`` returns shape
      ``(n, 2)`` (distinguisher, Gaussian statistic), or shape ``(n,)`` when the distinguisher is
      itself the Gaussian statistic.
    * ``noise_std`` and ``epsilon_at_noise``: the measured-noise audit (module docstring). ``scores``
      then returns a dict ``{"score": (n,), "gaussian": (n,) (Gaussian cases), "noise": (n,) or
      (n, p)}``; ``noise_std`` is the claimed std of each ``noise`` entry and
      ``epsilon_at_noise(ratio)`` the accounted ε had every noise been ``ratio`` times the claimed.
    """

    name: str
    method: str
    scores: Callable[[bool, bool, int, int], np.ndarray]
    epsilon: float
    delta: float
    n_runs: int = 1000
    description: str = ""
    info: dict = field(default_factory=dict, hash=False, compare=False)
    gaussian: bool = False
    #: runs per side of the noise-off audit and of the mutant (None: ``n_runs``). A Gaussian case's
    #: noise-off tight bound is unbounded at any run count and the measured-noise audit sees half
    #: the noise from a few hundred runs; only the distribution-free power check needs many.
    power_runs: int | None = None
    #: the noise-off audit gets more runs (doubling from ``power_runs``, at most this many) where the
    #: distribution-free bound needs them to be able to exceed the claim (:func:`runs_for_power`)
    power_runs_max: int = POWER_RUNS_MAX
    mutant_runs: int | None = None
    noise_std: float | None = None
    epsilon_at_noise: Callable[[float], float] | None = field(default=None, hash=False, compare=False)


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
    #: the tight audit (:func:`gaussian_audit`) of a Gaussian case, else None
    tight: dict | None = None
    #: the measured-noise audit (:func:`noise_audit` and its ``epsilon_lower``), else None
    noise_measured: dict | None = None

    @property
    def epsilon_tight(self) -> float | None:
        return None if self.tight is None else self.tight["epsilon_lower"]

    @property
    def epsilon_noise(self) -> float | None:
        return None if self.noise_measured is None else self.noise_measured["epsilon_lower"]

    @property
    def epsilon_max(self) -> float:
        """The largest of this result's lower bounds."""
        return max(self.epsilon_lower, self.epsilon_tight or 0.0, self.epsilon_noise or 0.0)

    def to_dict(self) -> dict:

        return asdict(self)


@dataclass(frozen=True)
class AuditReport:
    """The audit of one case with the noise on and off, and of its halved-noise mutant."""

    case: AuditCase
    noisy: AuditResult
    noise_off: AuditResult | None
    mutant: AuditResult | None = None

    @property
    def sound(self) -> bool:
        """No lower bound of the noisy mechanism (distribution-free, tight, measured-noise) exceeds
        the accounted ε."""
        return self.noisy.epsilon_max <= self.case.epsilon

    @property
    def powerful(self) -> bool | None:
        """A noise-off bound (distribution-free, or tight for a Gaussian case) exceeds the accounted ε
        (the audit could have caught a leak)."""
        if self.noise_off is None:
            return None
        return max(self.noise_off.epsilon_lower, self.noise_off.epsilon_tight or 0.0) > self.case.epsilon

    @property
    def noise_off_power(self) -> dict | None:
        """What each bound reaches with the noise off, beside the bound itself (its power): the
        distribution-free bound and its ceiling at the noise-off run count (the most a perfect
        separation gives), the tight bound of a Gaussian case, and whether each exceeds the accounted
        ε. The measured-noise audit has no noise-off value (there is no noise to measure): its power
        is the halved-noise mutant's verdict."""
        if self.noise_off is None:
            return None
        off, eps = self.noise_off, self.case.epsilon
        df, tight = off.epsilon_lower, off.epsilon_tight
        return {
            "distribution_free": df,
            "distribution_free_ceiling": distribution_free_ceiling(off.n_runs, off.delta, off.alpha),
            "distribution_free_powerful": df > eps,
            "tight": tight,
            "tight_powerful": None if tight is None else tight > eps,
            "n_runs": off.n_runs,
        }

    @property
    def tightness(self) -> float | None:
        """Tight audited ε over accounted ε (Gaussian cases)."""
        tight = self.noisy.epsilon_tight
        return None if tight is None or not self.case.epsilon > 0 else tight / self.case.epsilon

    @property
    def mutant_epsilon(self) -> float | None:
        """The mutant's largest lower bound (distribution-free, tight or measured-noise)."""
        if self.mutant is None:
            return None
        return self.mutant.epsilon_max

    @property
    def mutant_caught(self) -> bool | None:
        """The mutant's audited ε exceeds the claim of the unmutated run."""
        return None if self.mutant is None else self.mutant_epsilon > self.case.epsilon

    def to_dict(self) -> dict:

        mut = None
        if self.mutant is not None:
            mut = {
                "epsilon_audited": self.mutant_epsilon,
                "caught": self.mutant_caught,
                "epsilon_audited_distribution_free": self.mutant.epsilon_lower,
                "epsilon_audited_tight": self.mutant.epsilon_tight,
                "epsilon_audited_noise": self.mutant.epsilon_noise,
                "noise_scale": self.case.info.get("mutant_noise_scale"),
                "result": self.mutant.to_dict(),
            }
        return json_ready(
            {
                "name": self.case.name,
                "method": self.case.method,
                "description": self.case.description,
                "delta": self.case.delta,
                "epsilon_accounted": self.case.epsilon,
                "epsilon_audited": self.noisy.epsilon_lower,
                "epsilon_audited_tight": self.noisy.epsilon_tight,
                "epsilon_audited_noise": self.noisy.epsilon_noise,
                "noise_ratio_upper": None
                if self.noisy.noise_measured is None
                else self.noisy.noise_measured["ratio_upper"],
                "tightness": self.tightness,
                "gaussian": self.case.gaussian,
                "why_not_gaussian": None if self.case.gaussian else self.case.info.get("why_not_gaussian"),
                "epsilon_audited_noise_off": None if self.noise_off is None else self.noise_off.epsilon_lower,
                "noise_off_power": self.noise_off_power,
                "sound": self.sound,
                "powerful": self.powerful,
                "mutant": mut,
                "n_runs": self.noisy.n_runs,
                "noisy": self.noisy.to_dict(),
                "noise_off": None if self.noise_off is None else self.noise_off.to_dict(),
                "info": dict(self.case.info),
            }
        )


def _split(case: AuditCase, s, n_runs: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(distinguisher scores, Gaussian statistic or None, noise residual or None) of one side's
    ``scores`` output."""
    if isinstance(s, dict):
        score, _, _ = _split(case, s["score"], n_runs)
        g = s.get("gaussian")
        g = None if g is None or not case.gaussian else np.asarray(g, dtype=np.float64).reshape(n_runs)
        r = s.get("noise")
        r = None if r is None else np.asarray(r, dtype=np.float64).reshape(n_runs, -1)
        return score, g, r
    s = np.asarray(s, dtype=np.float64)
    if s.shape == (n_runs, 2):
        return s[:, 0], s[:, 1], None
    if s.shape != (n_runs,):
        raise ValueError(
            f"audit case {case.name!r}: scores must return shape ({n_runs},) or ({n_runs}, 2), got {s.shape}"
        )
    return s, (s if case.gaussian else None), None


def _run(
    case: AuditCase, noise: bool, n_runs: int, seed: int, alpha: float, noise_alpha: float = NOISE_ALPHA
) -> AuditResult:
    t0 = time.perf_counter()
    ss = np.random.SeedSequence([int(seed), 1 if noise else 0]).generate_state(2, dtype=np.uint32)
    s_in, g_in, r_in = _split(case, case.scores(True, noise, n_runs, int(ss[0])), n_runs)
    s_out, g_out, r_out = _split(case, case.scores(False, noise, n_runs, int(ss[1])), n_runs)
    r = epsilon_lower_bound_from_scores(s_in, s_out, case.delta, alpha)
    tight = None
    if case.gaussian and g_in is not None and g_out is not None:
        tight = gaussian_audit(g_in, g_out, case.delta, alpha)
    measured = None
    # noise off: there is no noise to measure (the residual is constant); the power check is the
    # canary audits' business
    if noise and case.noise_std and case.epsilon_at_noise is not None and r_in is not None and r_out is not None:
        measured = noise_audit(r_in, r_out, case.noise_std, noise_alpha)
        measured["alpha"] = noise_alpha
        measured["epsilon_lower"] = float(case.epsilon_at_noise(measured["ratio_upper"]))
    return AuditResult(
        name=case.name,
        method=case.method,
        noise=noise,
        epsilon_accounted=float(case.epsilon),
        epsilon_lower=r["epsilon_lower"],
        delta=case.delta,
        alpha=alpha,
        n_runs=n_runs,
        threshold=r["threshold"],
        tpr=r["tpr"],
        fpr=r["fpr"],
        seconds=time.perf_counter() - t0,
        tight=tight,
        noise_measured=measured,
    )


def audit_case(
    case: AuditCase,
    *,
    n_runs: int | None = None,
    seed: int = 0,
    alpha: float = 0.05,
    power_check: bool = True,
    mutant: AuditCase | None = None,
    power_runs: int | None = None,
    mutant_runs: int | None = None,
    noise_alpha: float = NOISE_ALPHA,
) -> AuditReport:
    """Audit ``case``: ``n_runs`` runs with and without the canary with the noise on, ``power_runs``
    with it off (when ``power_check``), and ``mutant_runs`` of ``mutant`` (the same case built with
    ``noise_scale < 1``) with its noise on. An ``n_runs`` given applies to all three unless
    ``power_runs`` / ``mutant_runs`` are given too; without it, the case's ``n_runs``,
    ``power_runs`` and ``mutant_runs`` apply. Returns an :class:`AuditReport` (``sound``,
    ``powerful``, ``tightness``, ``mutant_caught``, ``to_dict()``)."""
    if n_runs is None:
        n = int(case.n_runs)
        n_off, n_mut = int(power_runs or case.power_runs or n), int(mutant_runs or case.mutant_runs or n)
    else:
        n = int(n_runs)
        n_off, n_mut = int(power_runs or n), int(mutant_runs or n)
    if power_runs is None:  # more noise-off runs where the distribution-free bound needs them
        n_off = max(n_off, runs_for_power(case.epsilon, case.delta, alpha, n_off, case.power_runs_max))
    if min(n, n_off, n_mut) < 8:
        raise ValueError(f"run counts must be >= 8, got {n}, {n_off}, {n_mut}")
    if mutant is not None and not math.isclose(mutant.epsilon, case.epsilon, rel_tol=1e-9):
        raise ValueError(
            f"the mutant of {case.name!r} must keep the unmutated claim {case.epsilon}, got {mutant.epsilon}"
        )
    noisy = _run(case, True, n, seed, alpha, noise_alpha)
    off = _run(case, False, n_off, seed, alpha, noise_alpha) if power_check else None
    mut = _run(mutant, True, n_mut, seed + 7919, alpha, noise_alpha) if mutant is not None else None
    return AuditReport(case=case, noisy=noisy, noise_off=off, mutant=mut)
