"""Checks of the ``<method>.train`` parameter groups against the registry's config classes.

Called by the run hook before any node runs (with the generic checks of
:mod:`fedclust.params_check`), so that a wrong value fails the run at once with every problem listed.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from fedclust.registry.spec import REGISTRY


def _rotation_groups(data: Mapping) -> int:
    """The number of rotation groups ``clustered_fl.data`` asks for."""
    if data.get("angles"):
        return len(data["angles"])
    if data.get("ratios"):
        return len(data["ratios"])
    return int(data.get("n_groups") or 4)


def _dk_pp_rounds(cfg, private: bool, where: str) -> list[str]:
    """DK++ spends its first rounds on seeding and weighting: the rounds of the run must leave room."""
    key = "private_rounds" if private and cfg.private_rounds else "rounds"
    rounds, seeding = cfg.rounds_for(private), cfg.seeding_for(private)
    if rounds >= seeding + 1:
        return []
    return [
        f"{where}.{key} = {rounds} is too few for DK++, which spends {seeding} k-means|| seeding round(s) and "
        f"1 weighting round before its Lloyd rounds: set {where}.{key} >= {seeding + 1}, or lower "
        f"{where}.seeding_rounds (0 is the DP variant)"
    ]


def method_problems(params: Mapping[str, Any], used: Iterable[str] | None = None) -> list[str]:
    """Every problem of the ``<method>.train`` groups of the registered methods (those whose
    ``params:<method>.train`` is in ``used``, or all when ``used`` is None), checked by their config
    classes, plus the checks that need another group (RR-Cluster's ``B`` against the clients)."""
    used = None if used is None else set(used)
    problems: list[str] = []
    for name, spec in REGISTRY.items():
        if used is not None and f"params:{name}.train" not in used:
            continue
        group = (params.get(name) or {}).get("train") if isinstance(params.get(name), Mapping) else None
        where = f"{name}.train"
        values, found = spec.config.collect(group, where)
        if found:
            problems.extend(found)
            continue
        cfg = spec.config(**values)
        between = cfg.problems(where)
        problems.extend(between)
        if name == "dk_pp" and not between:
            problems.extend(_dk_pp_rounds(cfg, (params.get("privacy") or {}).get("epsilon") is not None, where))
        if name == "rr_cluster" and not between:
            data = (params.get("clustered_fl") or {}).get("data") or {}
            try:
                M, k = int(data.get("n_clients")), int(cfg.k or _rotation_groups(data))
            except (TypeError, ValueError):
                continue
            problems.extend(cfg.feasibility(M, k, where))
    return problems
