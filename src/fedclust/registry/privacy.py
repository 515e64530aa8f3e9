"""Calibration helpers shared by the method adapters (plain Python, no Kedro)."""

from __future__ import annotations

import logging
import math

from fedclust.options import check_number
from fedclust.params_check import ParameterError, show
from fedclust.privacy._validate import check_delta, check_delta_for_units
from fedclust.privacy.accountants import calibrate_noise_multiplier

logger = logging.getLogger("fedclust.registry")


#: the range of privacy.epsilon every method accepts: below it the noise calibration fails (the
#: accountant's search and DP-FedC's per-round split leave floating point), above it the noise is so
#: small that the guarantee means nothing and some calibrations ask for absurd amounts of memory
EPSILON_RANGE = (1e-3, 1e3)
#: methods whose range is narrower than :data:`EPSILON_RANGE` (none at present; the place to say so)
EPSILON_RANGES: dict[str, tuple[float, float]] = {}


#: the accountants a run may name (privacy.accountant)
ACCOUNTANTS = ("rdp", "pld")


def check_privacy_params(privacy: dict, method: str | None = None) -> tuple[float | None, float]:
    """Validated ``(epsilon or None, delta)`` from the ``privacy`` parameter group; an epsilon outside
    the range of ``method`` (:data:`EPSILON_RANGES`, default :data:`EPSILON_RANGE`) is an error that
    gives the range. Every error is a :class:`~fedclust.params_check.ParameterError` naming the key."""
    if not isinstance(privacy, dict):
        raise ParameterError(f"privacy is a group of parameters (epsilon, delta, accountant), got {privacy!r}")
    eps = privacy.get("epsilon")
    raw = privacy.get("delta", 1e-5)
    try:
        delta = check_delta(raw, "privacy.delta")
    except ParameterError:
        got = f"{float(raw)}" if isinstance(raw, (int, float)) and not isinstance(raw, bool) else show(raw)
        kind = "in" if isinstance(raw, (int, float)) and not isinstance(raw, bool) else "a number in"
        raise ParameterError(
            f"privacy.delta must be {kind} (0, 1), got {got}; a usual choice is below 1 / (number of samples), e.g. 1e-5"
        ) from None
    if eps is not None:
        eps = check_number("privacy.epsilon", eps, allow_inf=True)
        lo, hi = EPSILON_RANGES.get(method or "", EPSILON_RANGE)
        if math.isinf(eps) and eps > 0:
            eps = None
        elif eps <= 0:
            raise ParameterError(f"privacy.epsilon must be > 0 (or null for no privacy), got {eps}")
        elif not lo <= eps <= hi:
            who = f" for {method}" if method else ""
            raise ParameterError(
                f"privacy.epsilon = {eps:g} is outside the supported range{who}, [{lo:g}, {hi:g}]: "
                "set a value in that range, or null for a run without privacy"
            )
    accountant = privacy.get("accountant", "rdp")
    if accountant not in ACCOUNTANTS:
        raise ParameterError(f"privacy.accountant must be one of {list(ACCOUNTANTS)}, got {show(accountant)}")
    if not isinstance(privacy.get("allow_large_delta", False), bool):
        raise ParameterError(
            f"privacy.allow_large_delta must be true or false, got {show(privacy['allow_large_delta'])}"
        )
    return eps, delta


def check_delta_against_units(privacy: dict, n_units: int, unit: str) -> float | None:
    """In a private run, ``privacy.delta`` below ``1 / n_units`` (the protected units: samples, or
    clients for client-level DP), unless ``privacy.allow_large_delta`` (then with a warning):
    :func:`fedclust.privacy._validate.check_delta_for_units`. None (nothing checked) when the run is
    not private."""
    eps, delta = check_privacy_params(privacy)
    if eps is None:
        return None
    return check_delta_for_units(
        delta, n_units, unit, allow_large=bool(privacy.get("allow_large_delta", False)), name="privacy.delta"
    )


def non_private_calibration(privacy: dict, method: str, unit: str) -> dict:
    """Calibration record of a method without a private variant. With a budget set, the run is
    still not private: the report says epsilon = inf and a note says why (never silently)."""
    eps, delta = check_privacy_params(privacy)
    notes = []
    if eps is not None:
        notes.append(
            f"{method} has no differentially private variant: the run is not private whatever privacy.epsilon says"
        )
        logger.warning(notes[-1])
    return {"mechanism": "none", "unit": unit, "delta": delta, "epsilon_target": eps, "private": False, "notes": notes}


def per_round_noise(
    privacy: dict, rounds: int, clip, *, mechanisms_per_round: int = 1, extra_releases: int = 0
) -> dict:
    """Noise multiplier z for a method that releases ``mechanisms_per_round`` Gaussians (each of
    noise std z x its sensitivity) in each of ``rounds`` rounds, so that the whole run is
    (epsilon, delta)-DP by the accountant (sample-level, add/remove, no amplification claimed).

    Used by FKM and the k-means-family baselines: the same budget gives every method of a
    comparison the same guarantee. ``clip`` is the clip, or the name of the rule that gives it when
    the run starts (the noise multiplier does not depend on it); ``extra_releases`` more Gaussians of
    the same multiplier (a DP clip estimate) share the budget.
    """

    eps, delta = check_privacy_params(privacy)
    base = {"mechanism": "gaussian", "unit": "sample", "delta": delta, "clip": clip, "epsilon_target": eps}
    if eps is None:
        return {**base, "private": False, "noise_multiplier": 0.0}
    if not isinstance(clip, str) and (clip is None or float(clip) <= 0):
        raise ValueError("train.clip (L2 bound on every sample) must be > 0 for a private run")
    extra = int(extra_releases)
    # releases of one multiplier without sampling compose alike however they are grouped in steps
    z = calibrate_noise_multiplier(
        eps,
        delta,
        steps=int(rounds) * int(mechanisms_per_round) + extra if extra else int(rounds),
        sampling="none",
        n_mechanisms=1 if extra else int(mechanisms_per_round),
        accountant=privacy.get("accountant", "rdp"),
    )
    out = {**base, "private": True, "noise_multiplier": float(z), "mechanisms_per_round": int(mechanisms_per_round)}
    if extra:
        out["extra_releases"] = extra
    return out


def flag_non_dp(noise: dict, method: str, steps: list[str]) -> dict:
    """Add the notes and the warning for a private calibration of a run whose ``steps`` are not DP."""
    if noise.get("private"):
        if steps:
            msg = (
                "the run adds the calibrated noise but is NOT differentially private, so its report gives "
                "epsilon = inf: " + "; ".join(steps)
            )
            logger.warning("%s: %s", method, msg)
            noise["notes"] = list(noise.get("notes", ())) + [msg]
            noise["dp"] = False
        else:
            noise["dp"] = True
    return noise
