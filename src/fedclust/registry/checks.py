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
        if name == "rr_cluster" and not between:
            data = (params.get("clustered_fl") or {}).get("data") or {}
            try:
                M, k = int(data.get("n_clients")), int(cfg.k or _rotation_groups(data))
            except (TypeError, ValueError):
                continue
            problems.extend(cfg.feasibility(M, k, where))
    return problems
