"""Privacy accounting of :class:`~fedclust.privacy.events.GaussianRelease` lists with ``dp-accounting``.

A training run returns the releases it made; this module turns them into ``dp_accounting`` DP events
and asks an RDP (Mironov 2017) or PLD (privacy-loss-distribution, Koskela et al. / Doroshenko et al.)
accountant for the ε spent at a given δ. :func:`calibrate_noise_multiplier` runs the same
accountant backwards: the smallest noise multiplier that reaches a target ε.

Event structure (:func:`_key_event`): a release is ``count`` repetitions of one step,
``SelfComposedDpEvent(step, count)``. The step is the sampling event wrapped around the step's
Gaussian (one ``GaussianDpEvent`` with the effective noise multiplier, below):

* ``sampling="none"``: the Gaussians themselves;
* ``"poisson"``: ``PoissonSampledDpEvent(sampling_rate, ...)``;
* ``"without_replacement"``: ``SampledWithoutReplacementDpEvent(population, sample_size, ...)``.

Several Gaussians applied to the same selected units in one step (RR-Cluster's identifier and model
noise, Prop. 4.1) are exactly one Gaussian with the *effective* noise multiplier
``z_eff = (Σ_i z_i^{-2})^{-1/2}`` (rescale each output by its own ``1/z_i`` and stack them; see
Mironov et al. 2019, Sec. 3). Both accountants are fed that single Gaussian, which is required by the PLD
accountant inside a sampling event, and equivalent for the RDP accountant.

Neighbouring relations. ``dp-accounting``'s RDP accountant accounts Poisson sampling under
add/remove-one neighbours and fixed-size sampling without replacement (Wang, Balle & Kasiviswanathan
2019, Thm 27) under **replace-one** neighbours only; its PLD accountant has no without-replacement
event. We therefore account a release with

* ``neighbouring="replace_one"`` and ``"without_replacement"`` with the WBK19 bound as is (the noise
  multiplier must be relative to the replace-one sensitivity, e.g. ``2C`` for a sum of items clipped
  to ``C``);
* ``neighbouring="add_remove"`` and ``"without_replacement"`` according to ``wor_add_remove``:

  - ``"replace_one"`` (default): a sound bound. Under fixed-size sampling the
    guarantee is stated for replace-one neighbours; a replacement is a removal plus an addition, so
    the replace-one sensitivity is at most twice the add/remove one, and the WBK19 replace-one bound
    is applied with half the noise multiplier;
  - ``"poisson"``: as Poisson sampling with ``q = sample_size/population`` under add/remove. Common
    practice, but **not a theorem** for fixed-size batches: only for
    reproducing a paper's number; :func:`accounting_notes` says so in every report that uses it.

* ``"poisson"`` with ``neighbouring="replace_one"`` is not supported by ``dp-accounting`` and raises.

In every case the noise multiplier is relative to the L2 sensitivity under the release's own relation
(e.g. ``2 tau`` for replacing a record of norm <= tau). An unsampled Gaussian then has the same privacy
loss under either relation and is accounted as add/remove: ``dp-accounting``'s PLD ``REPLACE_ONE``
convention (multiplier relative to a zero element, a replacement shifting by two units) is not used.
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from fedclust.privacy._search import log_bisect
from fedclust.privacy._validate import check_delta, check_epsilon, check_rate, check_steps
from fedclust.privacy.events import NEIGHBOURING, SAMPLING, GaussianRelease

if TYPE_CHECKING:
    import dp_accounting as dpa

__all__ = [
    "ACCOUNTANTS",
    "WOR_ADD_REMOVE",
    "effective_noise_multiplier",
    "split_noise_multipliers",
    "epsilon",
    "calibrate_noise_multiplier",
    "CalibrationSearch",
    "accounting_notes",
]

ACCOUNTANTS = ("rdp", "pld")
WOR_ADD_REMOVE = ("poisson", "replace_one")
#: RDP orders: dp-accounting's defaults (1.1 .. 10.9 by 0.1, 11 .. 63, 128, 256, 512, 1024), written
#: out here (computed as dp-accounting computes them) so that importing this module does not load it
RDP_ORDERS = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(o) for o in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)


@functools.cache
def _dp() -> types.SimpleNamespace:
    """dp-accounting's names used here, imported on the first accounting or calibration."""
    # heavy: dp_accounting (with the SciPy modules it loads) takes about a second to import; only
    # accounting and calibration need it, not every `kedro` command that imports the method registry
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    relation = dp_accounting.NeighboringRelation
    return types.SimpleNamespace(
        events=dp_accounting,
        PLDAccountant=PLDAccountant,
        RdpAccountant=RdpAccountant,
        compute_epsilon=compute_epsilon,
        relation={"add_remove": relation.ADD_OR_REMOVE_ONE, "replace_one": relation.REPLACE_ONE},
    )


def effective_noise_multiplier(noise_multipliers) -> float:
    """``(Σ_i z_i^{-2})^{-1/2}``: the one Gaussian equivalent to several applied in the same step (0 if any is 0)."""
    z = np.asarray(noise_multipliers, dtype=np.float64).ravel()
    if z.size == 0:
        raise ValueError("noise_multipliers must not be empty")
    if np.any(z < 0):
        raise ValueError(f"noise_multipliers must be >= 0, got {z.tolist()}")
    if np.any(z == 0):
        return 0.0
    return float(1.0 / math.sqrt(float(np.sum(1.0 / z**2))))


def split_noise_multipliers(noise_multiplier: float, weights) -> tuple[float, ...]:
    """Per-mechanism multipliers ``z_i = z / sqrt(w_i)`` sharing one step's budget.

    ``w_i`` is mechanism i's share of the per-step RDP (``ε_i(α) = w_i α/(2 z²)``). With
    ``Σ w_i = 1`` the effective multiplier is ``z`` itself; with all ``w_i = 1`` every mechanism
    gets ``z``. RR-Cluster's split: ``weights = (rho_s, 1 - rho_s)`` gives
    ``(sigma_s, sigma_theta)`` with ``sigma_eff = z``.
    """
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size == 0 or np.any(~(w > 0)) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be finite and > 0, got {list(np.atleast_1d(weights))}")
    return tuple(float(noise_multiplier / math.sqrt(v)) for v in w)


def _as_release(r) -> GaussianRelease:
    if isinstance(r, GaussianRelease):
        return r
    if isinstance(r, dict):
        return GaussianRelease.from_dict(r)
    raise TypeError(f"releases must be GaussianRelease objects or dicts, got {type(r).__name__}")


def _as_releases(releases) -> list[GaussianRelease]:
    if releases is None:
        return []
    if isinstance(releases, (GaussianRelease, dict)):
        releases = [releases]
    return [_as_release(r) for r in releases]


def _accounting_key(r: GaussianRelease, wor_add_remove: str):
    """(relation, kind, z_eff, q or (n, m), count): what the accountant needs, hashable."""
    z = effective_noise_multiplier(r.noise_multipliers)
    # An unsampled Gaussian whose noise multiplier is relative to the sensitivity of the release's own
    # relation has the same privacy-loss distribution under either relation (a shift of one multiplier
    # unit), so it is accounted as add/remove. (dp-accounting's PLD REPLACE_ONE treats the multiplier as
    # relative to a zero element, i.e. a replacement as a shift of two units; we avoid that convention.)
    if r.sampling == "none":
        return ("add_remove", "gauss", z, None, r.count)
    if r.sampling == "poisson":
        if r.neighbouring != "add_remove":
            raise ValueError(
                "neighbouring='replace_one' with sampling='poisson' is not supported by dp-accounting; "
                "describe the release with neighbouring='add_remove' (noise multiplier relative to the "
                "add/remove sensitivity)"
            )
        if r.sampling_rate == 1.0:
            return ("add_remove", "gauss", z, None, r.count)
        return ("add_remove", "poisson", z, r.sampling_rate, r.count)
    n, m = int(r.population), int(r.sample_size)
    if m == n:
        return ("add_remove", "gauss", z, None, r.count)
    if r.neighbouring == "replace_one":
        return ("replace_one", "wor", z, (n, m), r.count)
    if wor_add_remove == "poisson":
        return ("add_remove", "poisson", z, m / n, r.count)
    return ("replace_one", "wor", z / 2.0, (n, m), r.count)


def _key_event(key) -> dpa.DpEvent:
    _, kind, z, par, count = key
    events = _dp().events
    g = events.GaussianDpEvent(z)
    if kind == "poisson":
        g = events.PoissonSampledDpEvent(par, g)
    elif kind == "wor":
        g = events.SampledWithoutReplacementDpEvent(par[0], par[1], g)
    return events.SelfComposedDpEvent(g, count)


@functools.lru_cache(maxsize=8192)
def _rdp_curve(key, orders: tuple) -> np.ndarray:
    dp = _dp()
    acc = dp.RdpAccountant(orders=list(orders), neighboring_relation=dp.relation[key[0]])
    acc.compose(_key_event(key))
    return acc.rdp


@functools.lru_cache(maxsize=4096)
def _epsilon_cached(keys: tuple, delta: float, accountant: str, orders: tuple, pld_interval: float) -> float:
    if accountant == "rdp":
        total = np.zeros(len(orders))
        for k in keys:
            total = total + _rdp_curve(k, orders)
        return float(_dp().compute_epsilon(np.asarray(orders), total, delta)[0])
    # Unsampled Gaussians have the same privacy loss under either relation (multiplier relative to
    # the release's own sensitivity), so only the sampled releases must agree on one relation.
    relations = {k[0] for k in keys if k[1] != "gauss"}
    if len(relations) > 1:
        raise ValueError("the PLD accountant needs one neighbouring relation for all sampled releases, got both")
    dp = _dp()
    acc = dp.PLDAccountant(neighboring_relation=dp.relation["add_remove"], value_discretization_interval=pld_interval)
    for k in keys:
        acc.compose(_pld_event(k))
    return float(acc.get_epsilon(delta))


def _pld_event(key) -> dpa.DpEvent:
    """The event the PLD accountant composes for ``key``, as an add/remove event.

    A Gaussian with multiplier ``z`` (relative to the replace-one sensitivity) on a batch of ``m`` of
    ``n`` records drawn without replacement, under replace-one neighbours, has the dominating pair
    ``((1 - g) P + g Q, P)`` (and its reverse) with ``g = m / n``, ``P = N(0, z^2)``, ``Q = N(1, z^2)``
    (Balle, Barthe & Gaboardi 2018, Thm 10; Zhu, Dong & Wang 2022): the pair of a Poisson-sampled
    Gaussian with rate ``g`` under add/remove, which dp-accounting's PLD accountant composes in
    both directions. dp-accounting has no without-replacement PLD event, so that event stands in."""
    _, kind, z, par, count = key
    if kind == "wor":
        n, m = par
        events = _dp().events
        return events.SelfComposedDpEvent(events.PoissonSampledDpEvent(m / n, events.GaussianDpEvent(z)), count)
    return _key_event(key)


def epsilon(
    releases: Iterable[GaussianRelease] | GaussianRelease,
    delta: float,
    accountant: str = "rdp",
    *,
    wor_add_remove: str = "replace_one",
    orders=None,
    pld_discretization: float = 1e-3,
) -> float:
    """ε spent at ``delta`` by all ``releases`` composed (``dp-accounting``'s RDP or PLD accountant).

    Returns ``0.0`` for no releases (or only ``count == 0`` ones), ``math.inf`` if any release adds
    no noise. ``wor_add_remove`` chooses how add/remove releases with fixed-size sampling are
    accounted (module docstring). ``orders`` overrides the RDP orders; ``pld_discretization`` is the
    PLD value-discretization interval (smaller: more exact, slower). Results are cached.
    """
    d = check_delta(delta)
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if wor_add_remove not in WOR_ADD_REMOVE:
        raise ValueError(f"wor_add_remove must be one of {WOR_ADD_REMOVE}, got {wor_add_remove!r}")
    rs = [r for r in _as_releases(releases) if r.count > 0]
    if not rs:
        return 0.0
    if any(not r.is_private for r in rs):
        return math.inf
    keys = tuple(_accounting_key(r, wor_add_remove) for r in rs)
    ords = RDP_ORDERS if orders is None else tuple(float(o) for o in orders)
    return _epsilon_cached(keys, d, accountant, ords, float(pld_discretization))


def accounting_notes(releases, wor_add_remove: str = "replace_one") -> list[str]:
    """Plain-language notes on how :func:`epsilon` accounted ``releases`` (for privacy reports)."""
    notes = []
    for r in _as_releases(releases):
        if r.count == 0 or not r.is_private:
            continue
        name = f"release {r.label!r}" if r.label else "a release"
        if len(r.noise_multipliers) > 1:
            notes.append(
                f"{name}: {len(r.noise_multipliers)} Gaussians per step accounted as one Gaussian with the "
                f"effective noise multiplier {effective_noise_multiplier(r.noise_multipliers):.6g}"
            )
        if r.sampling == "without_replacement" and r.sample_size < r.population:
            if r.neighbouring == "replace_one":
                notes.append(f"{name}: fixed-size sampling without replacement, replace-one neighbours (WBK19 Thm 27)")
            elif wor_add_remove == "poisson":
                notes.append(
                    f"{name}: fixed-size sampling ({r.sample_size} of {r.population}) under add/remove neighbours "
                    f"accounted as Poisson sampling with q={r.sample_size / r.population:.6g}: an approximation, "
                    "NOT a valid DP guarantee for fixed-size batches; the sound figure uses "
                    "wor_add_remove='replace_one'"
                )
            else:
                notes.append(
                    f"{name}: fixed-size sampling under add/remove neighbours accounted with the replace-one "
                    "WBK19 bound at half the noise multiplier (replace = remove + add; sound, conservative)"
                )
    return notes


@dataclass(frozen=True)
class CalibrationSearch:
    """How :func:`calibrate_noise_multiplier` searches and accounts beyond the accountant: the bisection
    stops when its bracket is within ``rtol``, tries multipliers up to ``max_noise_multiplier``, and
    accounts add/remove neighbours under fixed-size sampling with ``wor_add_remove`` (as
    :func:`epsilon`)."""

    rtol: float = 1e-3
    max_noise_multiplier: float = 1e6
    wor_add_remove: str = "replace_one"


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    *,
    steps: int,
    sampling: str = "none",
    sampling_rate: float = 1.0,
    population: int | None = None,
    sample_size: int | None = None,
    accountant: str = "rdp",
    neighbouring: str = "add_remove",
    n_mechanisms: int = 1,
    weights=None,
    search: CalibrationSearch = CalibrationSearch(),
) -> float:
    """Smallest noise multiplier ``z`` whose ``steps`` releases spend at most ``target_epsilon`` at ``delta``.

    Each step applies ``n_mechanisms`` Gaussians (or ``len(weights)``); mechanism i gets the noise
    multiplier ``z / sqrt(w_i)`` (:func:`split_noise_multipliers`; default ``w_i = 1``: all get
    ``z``). Sampling as in :class:`GaussianRelease`: ``"poisson"`` uses ``sampling_rate``;
    ``"without_replacement"`` uses ``population`` and ``sample_size`` (or
    ``round(sampling_rate * population)``). ε is decreasing in ``z``; ``z`` is found by bisection on
    ``log z`` until the bracket is within ``search.rtol`` (:class:`CalibrationSearch`), and the upper
    end is returned, so ``epsilon(...) <= target_epsilon`` holds for the result.
    """
    rtol, max_noise_multiplier, wor_add_remove = search.rtol, search.max_noise_multiplier, search.wor_add_remove
    eps_t = check_epsilon(target_epsilon, "target_epsilon")
    d = check_delta(delta)
    T = check_steps(steps, "steps")
    q = check_rate(sampling_rate, "sampling_rate")
    if sampling not in SAMPLING:
        raise ValueError(f"sampling must be one of {SAMPLING}, got {sampling!r}")
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {rtol!r}")
    if weights is None:
        if isinstance(n_mechanisms, bool) or int(n_mechanisms) != n_mechanisms or n_mechanisms < 1:
            raise ValueError(f"n_mechanisms must be an integer >= 1, got {n_mechanisms!r}")
        w = (1.0,) * int(n_mechanisms)
    else:
        w = tuple(float(v) for v in np.atleast_1d(weights))
        if n_mechanisms not in (1, len(w)):
            raise ValueError(f"n_mechanisms={n_mechanisms} disagrees with len(weights)={len(w)}")
        split_noise_multipliers(1.0, w)  # validates the weights
    if sampling == "without_replacement":
        if population is None:
            raise ValueError("population must be given (an integer >= 1) for sampling='without_replacement'")
        if sample_size is None:
            sample_size = max(1, int(round(q * population)))
    rel = dict(
        count=T,
        sampling=sampling,
        sampling_rate=q if sampling == "poisson" else 1.0,
        population=population if sampling == "without_replacement" else None,
        sample_size=sample_size if sampling == "without_replacement" else None,
        neighbouring=neighbouring,
    )

    def eps_of(z: float) -> float:
        r = GaussianRelease(split_noise_multipliers(z, w), **rel)
        return epsilon([r], d, accountant, wor_add_remove=wor_add_remove)

    def unreachable():
        return ValueError(
            f"target_epsilon={eps_t:g} is not reachable with a noise multiplier <= {max_noise_multiplier:g} "
            f"(delta={d:g}, steps={T}); increase target_epsilon or delta"
        )

    return log_bisect(
        lambda z: eps_of(z) > eps_t, rtol, max_value=max_noise_multiplier, min_value=1e-8, unreachable=unreachable
    )
