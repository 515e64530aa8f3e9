"""Privacy nodes shared by the method pipelines.

The calibration node of each method lives with the method (its noise depends on its protocol);
the report node is the same for all: it accounts the releases the run actually made.
"""

from __future__ import annotations

import math

from fedclust.privacy.report import privacy_report


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
    import logging

    eps, delta = check_privacy_params(privacy)
    notes = []
    if eps is not None:
        notes.append(f"{method} has no differentially private variant: the run is not private whatever privacy.epsilon says")
        logging.getLogger(__name__).warning(notes[-1])
    return {"mechanism": "none", "unit": unit, "delta": delta, "epsilon_target": eps, "private": False, "notes": notes}


def calibrate_per_round_noise(privacy: dict, train: dict, *, mechanisms_per_round: int = 1, rounds_key: str = "rounds") -> dict:
    """Noise multiplier z for a method that releases ``mechanisms_per_round`` Gaussians (each of
    noise std z x its sensitivity) in each of ``train[rounds_key]`` rounds, so that the whole run is
    (epsilon, delta)-DP by the accountant (sample-level, add/remove, no amplification claimed).

    Used by FKM and the k-means-family baselines: the same budget gives every method of a
    comparison the same guarantee.
    """
    from fedclust.privacy.accountants import calibrate_noise_multiplier

    eps, delta = check_privacy_params(privacy)
    clip = train.get("clip")
    base = {"mechanism": "gaussian", "unit": "sample", "delta": delta, "clip": clip, "epsilon_target": eps}
    if eps is None:
        return {**base, "private": False, "noise_multiplier": 0.0}
    if clip is None or float(clip) <= 0:
        raise ValueError("train.clip (L2 bound on every sample) must be > 0 for a private run")
    z = calibrate_noise_multiplier(
        eps, delta, steps=int(train[rounds_key]), sampling="none", n_mechanisms=int(mechanisms_per_round),
        accountant=privacy.get("accountant", "rdp"),
    )
    return {**base, "private": True, "noise_multiplier": float(z), "mechanisms_per_round": int(mechanisms_per_round)}


def condense_notes(notes, limit: int = 8) -> list[str]:
    """Unique notes in order; notes that differ only in their numbers are kept once, with a count."""
    import re

    seen: dict[str, list] = {}
    for note in notes:
        key = re.sub(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "#", str(note))
        seen.setdefault(key, [note, 0])[1] += 1
    out = [note if count == 1 else f"{note} [and {count - 1} more like it]" for note, count in seen.values()]
    if len(out) > limit:
        out = out[:limit] + [f"... {len(out) - limit} more notes"]
    return out


def report_privacy(result, calibration: dict, privacy: dict, method: str) -> dict:
    """The privacy report of a finished run (written to data/08_reporting/<method>/privacy.json)."""
    _, delta = check_privacy_params(privacy)
    rep = privacy_report(
        list(result.dp_events),
        calibration.get("delta", delta),
        method=method,
        mechanism=calibration.get("mechanism", "gaussian"),
        unit=calibration.get("unit", "sample"),
        paper_epsilon=calibration.get("paper_epsilon"),
        paper_formula=calibration.get("paper_formula"),
        notes=tuple(condense_notes(tuple(calibration.get("notes", ())) + tuple(result.info.get("privacy_notes", ())))),
        accountant=privacy.get("accountant", "rdp"),
        outside=tuple(result.info.get("privacy_outside", ())),
    )
    rep["notes"] = condense_notes(rep.get("notes", []))
    rep["calibration"] = {k: v for k, v in calibration.items() if k not in ("notes",)}
    return rep
