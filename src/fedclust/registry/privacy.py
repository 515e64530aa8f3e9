"""Calibration helpers shared by the method adapters (plain Python, no Kedro)."""

from __future__ import annotations

import logging
import math

logger = logging.getLogger("fedclust.registry")


def check_privacy_params(privacy: dict) -> tuple[float | None, float]:
    """Validated ``(epsilon or None, delta)`` from the ``privacy`` parameter group."""
    eps = privacy.get("epsilon")
    delta = float(privacy.get("delta", 1e-5))
    if eps is not None:
        eps = float(eps)
        if math.isinf(eps):
            eps = None
        elif eps <= 0:
            raise ValueError(f"privacy.epsilon must be > 0 (or null for no privacy), got {eps}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"privacy.delta must be in (0, 1), got {delta}")
    return eps, delta


def non_private_calibration(privacy: dict, method: str, unit: str) -> dict:
    """Calibration record of a method without a private variant. With a budget set, the run is
    still not private: the report says epsilon = inf and a note says why (never silently)."""
    eps, delta = check_privacy_params(privacy)
    notes = []
    if eps is not None:
        notes.append(f"{method} has no differentially private variant: the run is not private whatever privacy.epsilon says")
        logger.warning(notes[-1])
    return {"mechanism": "none", "unit": unit, "delta": delta, "epsilon_target": eps, "private": False, "notes": notes}


def per_round_noise(privacy: dict, rounds: int, clip, *, mechanisms_per_round: int = 1) -> dict:
    """Noise multiplier z for a method that releases ``mechanisms_per_round`` Gaussians (each of
    noise std z x its sensitivity) in each of ``rounds`` rounds, so that the whole run is
    (epsilon, delta)-DP by the accountant (sample-level, add/remove, no amplification claimed).

    Used by FKM and the k-means-family baselines: the same budget gives every method of a
    comparison the same guarantee.
    """
    from fedclust.privacy.accountants import calibrate_noise_multiplier

    eps, delta = check_privacy_params(privacy)
    base = {"mechanism": "gaussian", "unit": "sample", "delta": delta, "clip": clip, "epsilon_target": eps}
    if eps is None:
        return {**base, "private": False, "noise_multiplier": 0.0}
    if clip is None or float(clip) <= 0:
        raise ValueError("train.clip (L2 bound on every sample) must be > 0 for a private run")
    z = calibrate_noise_multiplier(
        eps, delta, steps=int(rounds), sampling="none", n_mechanisms=int(mechanisms_per_round),
        accountant=privacy.get("accountant", "rdp"),
    )
    return {**base, "private": True, "noise_multiplier": float(z), "mechanisms_per_round": int(mechanisms_per_round)}


def flag_non_dp(noise: dict, method: str, steps: list[str]) -> dict:
    """Add the notes and the warning for a private calibration of a run whose ``steps`` are not DP."""
    if noise.get("private"):
        if steps:
            msg = ("the run adds the calibrated noise but is NOT differentially private, so its report gives "
                   "epsilon = inf: " + "; ".join(steps))
            logger.warning("%s: %s", method, msg)
            noise["notes"] = list(noise.get("notes", ())) + [msg]
            noise["dp"] = False
        else:
            noise["dp"] = True
    return noise
