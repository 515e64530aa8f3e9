"""Canary audit cases of every DP method, one module per method family.

This package sits above the methods and the registry (it runs each method's own code on tiny data),
beside the grids; the audit statistics themselves (bounds, the tight and the measured-noise audits,
:class:`~fedclust.privacy.audit.AuditCase`) live in :mod:`fedclust.privacy.audit`, which imports no
method.

Each family module defines ``CASES: dict[str, Callable[..., AuditCase]]``: a method name mapped to a
factory that builds the method's :class:`~fedclust.privacy.audit.AuditCase` (tiny data, a canary,
a distinguisher, and the accountant's ε of exactly the audited configuration). Every factory takes
keyword arguments with defaults (at least ``epsilon`` and ``delta``), so ``factory()`` works.

:func:`cases` merges the families; :func:`fedclust.privacy.audit.audit_case` runs one.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Callable

from fedclust.privacy.audit import AuditCase

#: The family modules, in report order.
FAMILIES = ("kmeans", "flower", "dp_fedc", "fedsc", "clustered_fl")
#: Families whose backend is an optional extra: left out (with their cases) when it is not installed.
OPTIONAL = {"flower": "flwr"}


def _family(fam: str):
    try:
        return importlib.import_module(f"fedclust.audits.{fam}")
    except ModuleNotFoundError as err:
        if fam in OPTIONAL and (err.name or "").split(".")[0] == OPTIONAL[fam]:
            return None  # the `deploy` extra is not installed: no Flower backend to audit
        raise


def cases() -> dict[str, Callable[..., AuditCase]]:
    """Every registered audit case factory, by method name."""
    out: dict[str, Callable[..., AuditCase]] = {}
    for fam in FAMILIES:
        mod = _family(fam)
        if mod is None:
            continue
        for name, factory in mod.CASES.items():
            if name in out:
                raise ValueError(f"audit case {name!r} is registered twice")
            out[name] = factory
    return out


def get(name: str, **kwargs) -> AuditCase:
    """The audit case of method ``name`` (kwargs go to its factory)."""
    all_cases = cases()
    if name not in all_cases:
        near = difflib.get_close_matches(name, all_cases, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise KeyError(f"no audit case for {name!r}{hint} (known: {sorted(all_cases)})")
    return all_cases[name](**kwargs)
