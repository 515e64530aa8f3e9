"""The privacy report of one run: the paper's claim and a standard accountant's ε side by side.

:func:`privacy_report` returns a plain, JSON-ready dict (``json.dumps`` works as is): infinite values
are written as the string ``"inf"``, so a non-private run says ``"epsilon": "inf"`` and
``"private": false`` explicitly.
"""

from __future__ import annotations

import math

import numpy as np

from fedclust.privacy import accountants
from fedclust.privacy._validate import check_delta

__all__ = ["privacy_report", "json_ready", "UNITS", "COVERED", "OUTSIDE", "SCOPE_TAG"]

#: What a finite epsilon covers: everything that leaves a client, as listed in
#: ``releases``, and whatever is computed from those releases alone.
COVERED = (
    "every release listed under 'releases' (all that the server and the other clients see)",
    "everything computed from those releases alone: the final centroids / cluster models and every "
    "intermediate global state",
    "each client's own outputs computed locally from the released values (its samples' labels, its "
    "choice of cluster model)",
)
#: Experimenter-side measurements of a simulation: computed on raw data and true labels, not released
#: by the protocol, and not covered by epsilon.
OUTSIDE = (
    "evaluation metrics (metrics.json: ACC, NMI, ARI, test accuracy, objective) computed on raw data and true labels",
    "per-round histories (MLflow round.* metrics, history.png) computed on raw data",
    "diagnostics in the run's info (step sizes, noise stds, gradient norms, clip counts, timing)",
    "partition statistics and data reports",
)
#: One-line MLflow tag value that says the same.
SCOPE_TAG = (
    "epsilon covers the releases in privacy.json and the final model; metrics, round.* histories "
    "and plots are experimenter-side evaluation on raw data, outside the guarantee"
)

UNITS = {
    "sample": "sample-level",
    "client": "client-level",
    "sample-level": "sample-level",
    "client-level": "client-level",
}


def json_ready(obj):
    """Recursively convert to JSON-safe Python types: ±inf -> ``"inf"``/``"-inf"``, NaN -> None,
    numpy scalars/arrays -> Python numbers/lists, tuples -> lists."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [json_ready(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    return obj


def privacy_report(
    releases,
    delta: float,
    *,
    method: str,
    mechanism: str,
    unit: str | None = None,
    paper_epsilon: float | None = None,
    paper_formula: str | None = None,
    notes=(),
    accountant: str = "rdp",
    wor_add_remove: str = "replace_one",
    pld: bool = True,
    outside=(),
) -> dict:
    """Account ``releases`` (a list of :class:`GaussianRelease` or their dicts) at ``delta``.

    Keys of the returned dict:

    * ``method``, ``mechanism``, ``unit`` (``"sample-level"``/``"client-level"``; taken from the
      releases when None), ``neighbouring`` (``"add_remove"``, ``"replace_one"``, ``"mixed"`` or None);
    * ``delta``, ``private`` (False when there is no release or any release adds no noise);
    * ``accountant`` and ``epsilon`` (= that accountant's ε), ``epsilon_accountant`` (same value),
      ``epsilon_rdp``, ``epsilon_pld`` (None where dp-accounting has no PLD for the releases, with a note);
    * ``epsilon_paper`` and ``paper_formula`` (the paper's own claim, if given);
    * ``notes``: validity notes (given ones first, then how the accountant treated the releases);
    * ``releases``: the releases as dicts, ``n_releases``;
    * ``covered_by_guarantee`` and ``outside_guarantee``: which outputs epsilon covers and which are
      experimenter-side evaluation (:data:`COVERED`, :data:`OUTSIDE`; ``outside`` adds method-specific ones).

    Infinite ε is stored as the string ``"inf"``.
    """
    d = check_delta(delta)
    if accountant not in accountants.ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {accountants.ACCOUNTANTS}, got {accountant!r}")
    rs = [r for r in accountants._as_releases(releases)]
    active = [r for r in rs if r.count > 0]
    all_notes = [str(n) for n in (notes or ())]
    private = bool(active) and all(r.is_private for r in active)
    unit_out = _report_unit(active, unit)
    rels = {r.neighbouring for r in active}
    neighbouring = rels.pop() if len(rels) == 1 else (None if not rels else "mixed")
    eps = _report_epsilons(active, d, private, accountant, wor_add_remove, pld, all_notes)
    primary = eps[accountant]
    if primary is None:
        primary = eps["rdp"]
        all_notes.append("the requested PLD accountant was unavailable; epsilon is the RDP value")
    out = {
        "method": method,
        "mechanism": mechanism,
        "unit": unit_out,
        "neighbouring": neighbouring,
        "delta": d,
        "private": private,
        "accountant": accountant,
        "epsilon": primary,
        "epsilon_accountant": primary,
        "epsilon_rdp": eps["rdp"],
        "epsilon_pld": eps["pld"],
        "epsilon_paper": None if paper_epsilon is None else float(paper_epsilon),
        "paper_formula": paper_formula,
        "notes": all_notes,
        "n_releases": len(rs),
        "releases": [r.to_dict() for r in rs],
        "covered_by_guarantee": list(COVERED) if private else [],
        "outside_guarantee": list(OUTSIDE) + [str(o) for o in outside]
        if private
        else ["every output: the run is not private"],
    }
    return json_ready(out)


def _report_unit(active, unit: str | None) -> str | None:
    """The report's unit: the given one, else the releases' (``"mixed"`` when they differ, None without any)."""
    if unit is None:
        units = {r.unit for r in active}
        return UNITS[units.pop()] if len(units) == 1 else (None if not units else "mixed")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {sorted(UNITS)}, got {unit!r}")
    return UNITS[unit]


def _report_epsilons(active, d: float, private: bool, accountant: str, wor_add_remove: str, pld: bool, notes: list):
    """``{"rdp": ε, "pld": ε or None}`` of the active releases (infinite for a non-private run), with
    the accountant's notes (and why a run is not private) appended to ``notes``."""
    eps = {"rdp": math.inf, "pld": math.inf}
    if not private:
        if not active:
            reason = "no DP release was recorded"
        else:
            steps = [r.label or "unnamed release" for r in active if not r.is_private]
            reason = "not a DP mechanism: " + "; ".join(dict.fromkeys(steps))
        notes.append(f"non-private run ({reason}): epsilon is infinite")
        return eps
    eps["rdp"] = accountants.epsilon(active, d, "rdp", wor_add_remove=wor_add_remove)
    if pld or accountant == "pld":
        try:
            eps["pld"] = accountants.epsilon(active, d, "pld", wor_add_remove=wor_add_remove)
        except ValueError as exc:
            eps["pld"] = None
            notes.append(f"PLD accountant not available: {exc}")
    else:
        eps["pld"] = None
    notes.extend(accountants.accounting_notes(active, wor_add_remove))
    return eps
